"""CPU time and peak memory of a system's server processes over one stretch of a benchmark, read
from Linux's /proc (the processes are this run's own children; clients are not among them):

- CPU: utime + stime of /proc/<pid>/stat (fields 14 and 15, in clock ticks), every thread of
  the process counted (a JVM's GC and compiler threads, a gateway's handler pools);
- peak RSS: VmHWM of /proc/<pid>/status, the high-water mark since the kernel last reset it.
  Writing "5" to /proc/<pid>/clear_refs resets it (Linux 4.0+, allowed on our own children),
  so each stretch's peak is its own, not the start-up's. Where the write is refused, VmRSS is
  sampled every 100 ms instead.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
SAMPLE_INTERVAL_S = 0.1


@dataclass(frozen=True)
class Usage:
    """What the processes used over a stretch: CPU-seconds summed over them, and the sum of
    their peak resident sets (each process's own peak; bytes)."""

    cpu_s: float
    peak_rss_bytes: int


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat.rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise ValueError(f"no {key} in /proc/{pid}/status")


def _reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class UsageMeter:
    """`start()` before the stretch, `stop()` after it, returning its Usage."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self._cpu_start: dict[int, float] = {}
        self._sampled_peak: dict[int, int] = {}
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self._peak_reset = False

    def start(self) -> None:
        self._peak_reset = all([_reset_peak(pid) for pid in self.pids])
        self._cpu_start = {pid: cpu_seconds(pid) for pid in self.pids}
        if not self._peak_reset:
            self._sampled_peak = {pid: _status_kib(pid, "VmRSS") for pid in self.pids}
            self._sampling.clear()
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()

    def _sample(self) -> None:
        while not self._sampling.wait(SAMPLE_INTERVAL_S):
            for pid in self.pids:
                try:
                    rss = _status_kib(pid, "VmRSS")
                except (OSError, ValueError):
                    continue  # the process ended: stop() says so
                self._sampled_peak[pid] = max(self._sampled_peak[pid], rss)

    def stop(self) -> Usage:
        cpu = sum(cpu_seconds(pid) - self._cpu_start[pid] for pid in self.pids)
        if self._peak_reset:
            peak_kib = sum(_status_kib(pid, "VmHWM") for pid in self.pids)
        else:
            self._sampling.set()
            if self._sampler is not None:
                self._sampler.join()
            peak_kib = sum(self._sampled_peak.values())
        return Usage(cpu, peak_kib * 1024)
