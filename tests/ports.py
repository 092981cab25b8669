"""Free loopback ports for servers the tests start as processes (containers, etcd, gateways
that must know each other's addresses before they start).

A port is picked before its server binds it, so something else may take it in between. Three
kinds of takers, each kept out its own way:
- the kernel: ports it hands out itself (a bind to port 0, every outgoing connection's local
  port) come from its ephemeral range, and a full run makes thousands of those. Ports are
  picked below that range.
- another pytest-xdist worker's picker: each worker picks from its own slice of that range
  (PYTEST_XDIST_WORKER gwN of PYTEST_XDIST_WORKER_COUNT), so two workers never hold the same
  port picked-but-not-yet-bound.
- the same process's picker: a cursor walks the slice, so a port handed out is not handed out
  again until the whole slice has been walked (a cluster picks its Kafka run, then its
  gateway's and nodes' ports, before binding any: a random pick could hand one of the run out
  twice, which a clean CI run hit). It leaves DERIVED_PORTS free after each pick: a Kafka
  listener picked as one port binds its nodes' lanes at port + node id, and the next pick
  (Apache Kafka's brokers beside seglog in a benchmark) must not be one of those.
Each port is still checked free by binding it (a port a long-lived server holds is skipped)."""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path
from typing import NamedTuple

# Below this, ports are often some system service's; above it and below the ephemeral range,
# only pickers like this one.
LOWEST_PICKED_PORT = 10_000
# Ports left unpicked after each pick, for ports derived from it (a Kafka listener's lanes).
DERIVED_PORTS = 8
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


class PortSlice(NamedTuple):
    """The ports [first, end) this process picks from."""

    first: int
    end: int


def worker_slice(ephemeral_low: int, worker: str | None, worker_count: str | None) -> PortSlice:
    """This process's share of [LOWEST_PICKED_PORT, ephemeral_low): all of it outside
    pytest-xdist, else one of `worker_count` equal slices by the worker's number."""
    try:
        index = int((worker or "").removeprefix("gw"))
        count = int(worker_count or "")
    except ValueError:
        return PortSlice(LOWEST_PICKED_PORT, ephemeral_low)
    if count < 1 or not 0 <= index < count:
        return PortSlice(LOWEST_PICKED_PORT, ephemeral_low)
    width = (ephemeral_low - LOWEST_PICKED_PORT) // count
    first = LOWEST_PICKED_PORT + index * width
    return PortSlice(first, first + width)


class _Cursor:
    """The next port to offer in this process's slice; walks it and wraps. It starts at a
    random place: a process the tests start (a campaign's script) has its parent's slice, and
    should not walk it in step with the parent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = -1

    def take(self, ports: PortSlice, count: int) -> int:
        """The first of `count` consecutive ports not offered since the last wrap."""
        with self._lock:
            if self._next < 0:
                self._next = random.SystemRandom().randrange(ports.first, ports.end)
            if not ports.first <= self._next <= ports.end - count:
                self._next = ports.first
            first = self._next
            self._next += count + DERIVED_PORTS
            return first


_CURSOR = _Cursor()


def _slice() -> PortSlice:
    return worker_slice(
        _ephemeral_low(),
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (each checked by binding), below the
    kernel's ephemeral range when it leaves room for that."""
    return [free_port_run(1) for _ in range(count)]


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1 now (for a setting that names
    one port and derives the rest), below the kernel's ephemeral range."""
    ports = _slice()
    if ports.end - ports.first < 10 * count:
        return _kernel_picked_run(count)
    for _ in range((ports.end - ports.first) // count + 1):
        first = _CURSOR.take(ports, count)
        if _all_free(first, count):
            return first
    raise RuntimeError(f"no {count} consecutive free ports in {ports.first}..{ports.end - 1}")


def _all_free(first: int, count: int) -> bool:
    sockets: list[socket.socket] = []
    try:
        for port in range(first, first + count):
            probe = socket.socket()
            sockets.append(probe)
            probe.bind(("127.0.0.1", port))
        return True
    except OSError:  # one of the run is in use
        return False
    finally:
        for s in sockets:
            s.close()


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _kernel_picked_run(count: int) -> int:
    """No room below the ephemeral range: let the kernel pick, and look for a run above."""
    for _ in range(1000):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count <= 65536 and _all_free(first, count):
            return first
    raise RuntimeError(f"no {count} consecutive free ports on loopback")
