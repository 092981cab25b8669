"""A helper process driven over its stdin, one command a line, each answered by one line on
its stdout; end of input stops it. The benchmarks' steady producer and latency consumer run
this way, so an application's client does not share the benchmark's interpreter (its GIL,
its garbage collector)."""

from __future__ import annotations

import subprocess
import sys


class LineProcess:
    def __init__(self, module: str, args: list[str], stop_timeout_s: float) -> None:
        """`python -m module args...`, started now."""
        self.module = module
        self.stop_timeout_s = stop_timeout_s
        self._process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def read_line(self) -> str:
        """Its next line; RuntimeError when it has exited instead."""
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.module} exited ({self._process.poll()})")
        return line

    def ask(self, command: str) -> str:
        assert self._process.stdin is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        return self.read_line()

    def stop(self) -> None:
        """End of input, then its exit awaited (killed, by its own pid, after the timeout)."""
        stdin = self._process.stdin
        if stdin is not None and not stdin.closed:
            stdin.close()
        try:
            self._process.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
