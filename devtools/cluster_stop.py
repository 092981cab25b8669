"""How `make run` stops: its processes in order (storage nodes, then gateways, then etcd and the
S3 store), one line each as it goes, so the terminal shows what Ctrl-C is waiting on and what
did not stop on its own:

    stopping: node-1 (pid 6227) stopped in 0.3 s
    stopping: node-2 (pid 6390) stopped in 0.2 s
    ...
    seglog local cluster stopped in 1.1 s

Nodes go before the gateways: a node's controlled shutdown moves its leaderships away through
the gateway, which must still be there to answer."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO


class _Process(Protocol):
    def alive(self) -> bool: ...

    @property
    def pid(self) -> int: ...


@dataclass(frozen=True)
class Stopping:
    """One process to stop: its name as make run printed it, the process, and how to stop it
    (which returns its exit code when the process says, None otherwise)."""

    name: str
    process: _Process
    stop: Callable[[], object]
    started: bool


def stop_in_order(processes: Sequence[Stopping], out: TextIO) -> float:
    """Stop each of `processes` in turn, printing a line for each; the seconds it all took."""
    began = time.monotonic()
    for each in processes:
        if not each.started:
            continue
        pid = each.process.pid
        if not each.process.alive():
            each.stop()  # reaps it
            print(f"stopping: {each.name} (pid {pid}) had already exited", file=out, flush=True)
            continue
        one = time.monotonic()
        code = each.stop()
        took_s = time.monotonic() - one
        # A negative code is the signal that ended it: -9 means its grace ran out (killed).
        how = "killed after its grace period" if code == -9 else "stopped"
        print(f"stopping: {each.name} (pid {pid}) {how} in {took_s:.1f} s", file=out, flush=True)
    took_s = time.monotonic() - began
    print(f"seglog local cluster stopped in {took_s:.1f} s", file=out, flush=True)
    return took_s
