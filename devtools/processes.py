"""Starting and stopping seglog server processes, for the local cluster, tests and benchmarks:
each process is started here, waited on until it prints its address, and stopped by its own
pid (SIGTERM, then SIGKILL after a grace period)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, BinaryIO

READY_TIMEOUT_S = 60.0


class ServerProcess:
    def __init__(
        self,
        name: str,
        module: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stderr_path: Path | None = None,
        echo_stdout: BinaryIO | None = None,
        command_prefix: Sequence[str] = (),
        own_process_group: bool = False,
    ) -> None:
        """`command_prefix`: words put before the interpreter, e.g. `ip netns exec NS` to run
        the server in a network namespace (exec keeps the pid, so stop and kill still reach
        the server itself). `own_process_group`: out of the starter's process group, so a
        terminal's Ctrl-C (SIGINT to the whole foreground group) reaches only the starter,
        which then stops its servers in order (make run: nodes first, then the gateway; all
        at once, the nodes' controlled shutdowns met a gateway already gone and retried it
        until their timeout, 21-31 s and ~18 warnings a second)."""
        self.command_prefix = list(command_prefix)
        self.own_process_group = own_process_group
        self.echo_stdout = echo_stdout
        self.name = name
        self.module = module
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.stderr_path = stderr_path
        self.process: subprocess.Popen[bytes] | None = None
        self.address = ""
        # A gateway's storage nodes' listener (--internal-listen), as it said when ready.
        self.internal_address = ""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Start and wait for the `... listening on HOST:PORT` line; return the address
        (and keep a gateway's internal one, `internal_address`)."""
        self.launch()
        return self.wait_ready(timeout_s)

    def launch(self) -> None:
        """Start the process, not waiting for it (start_all starts several at once)."""
        stderr = open(self.stderr_path, "ab") if self.stderr_path else None  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                [*self.command_prefix, sys.executable, "-m", self.module, *self.args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=self.env,
                process_group=0 if self.own_process_group else None,
            )
        finally:
            if stderr is not None:
                stderr.close()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Wait for a launched process's `... listening on` line; its address (killed and
        RuntimeError when it does not come within `timeout_s`)."""
        assert self.process is not None
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self._stdout().readline()))
        reader.daemon = True
        reader.start()
        reader.join(timeout_s)
        text = line[0].decode().strip() if line else ""
        if " listening on " not in text:
            self.kill()
            raise RuntimeError(
                f"{self.name} did not start (exit code {self.process.poll()}); "
                f"see {self.stderr_path or 'its stderr'}"
            )
        # `NAME listening on HOST:PORT[, internal HOST:PORT]` (services/serving.py).
        said = text.split(" listening on ", 1)[1]
        self.address, _, internal = said.partition(", internal ")
        self.internal_address = internal or self.address
        # Keep draining stdout so the child can never block on a full pipe; what it prints
        # there (console traces) goes to `echo_stdout` when one is given.
        threading.Thread(target=self._drain, daemon=True).start()
        return self.address

    def _drain(self) -> None:
        stdout, echo = self._stdout(), self.echo_stdout
        for line in stdout:
            if echo is not None:
                echo.write(line)
                echo.flush()

    def _stdout(self) -> IO[bytes]:
        assert self.process is not None and self.process.stdout is not None
        return self.process.stdout

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM, wait up to `grace_s`, then SIGKILL; returns the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start_all(processes: Sequence[ServerProcess], timeout_s: float = READY_TIMEOUT_S) -> None:
    """Start `processes` at once and wait until each is ready. A server's start is mostly
    its interpreter's imports (~1-1.5 s of CPU a gateway or node, measured): one after the
    other, three nodes take three times that; together, two cores share the work. On a
    failure the processes already launched keep running: the caller stops them as usual."""
    for process in processes:
        process.launch()
    for process in processes:
        process.wait_ready(timeout_s)


def children(pid: int) -> list[int]:
    """The pids of `pid`'s child processes (Linux's /proc; [] where it is not readable): a
    starter's servers in process groups of their own (own_process_group) are not reached by
    a signal to the starter's group, so a starter killed past its grace needs them named."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(word) for word in task.read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def gateway_process(
    listen: str,
    data_dir: Path,
    *,
    internal_listen: str | None = None,
    extra_args: Sequence[str] = (),
    **kwargs: object,
) -> ServerProcess:
    """A gateway; its storage nodes' listener on `internal_listen`, by default the listen
    host's any free port (the gateway's own default, port 7090, would be shared by every
    gateway a test run starts): nodes are given its `internal_address`. A gateway restarted
    under running nodes needs the same one again, so give those a fixed port."""
    host = listen.rsplit(":", 1)[0]
    internal = internal_listen or f"{host}:0"
    args = ["--listen", listen, "--internal-listen", internal, "--data-dir", str(data_dir)]
    return ServerProcess("gateway", "services.gateway", [*args, *extra_args], **kwargs)  # type: ignore[arg-type]


def node_process(
    node_id: int,
    listen: str,
    data_dir: Path,
    gateway: str,
    *,
    extra_args: Sequence[str] = (),
    **kwargs: object,
) -> ServerProcess:
    args = [
        "--node-id",
        str(node_id),
        "--listen",
        listen,
        "--data-dir",
        str(data_dir),
        "--gateway",
        gateway,
        *extra_args,
    ]
    return ServerProcess(f"node-{node_id}", "services.storage_node", args, **kwargs)  # type: ignore[arg-type]
