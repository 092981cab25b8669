"""How the benchmarks time a figure and its baseline on a shared, noisy machine."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import TypeVar

R = TypeVar("R")


def best_of(runs: int, fn: Callable[[], float]) -> float:
    """The shortest of `runs` timings (each call of `fn` returns seconds)."""
    return min(fn() for _ in range(runs))


def best_in_turns(runs: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each run's best time of `rounds`, the runs taking turns round by round, so that a slow
    moment of this shared machine lands on one round of one side, not on one side."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(run())
    return {name: min(elapsed) for name, elapsed in times.items()}


class StolenTime:
    """The share of this virtual machine's CPU time its hypervisor gave to other guests
    (the `steal` column of /proc/stat's first line) between `start` and `share`: when it is
    high, a latency figure measured then measures the host's neighbours too. None where the
    kernel does not count it."""

    def __init__(self) -> None:
        self._start = _cpu_ticks()

    def share(self) -> float | None:
        now = _cpu_ticks()
        if self._start is None or now is None:
            return None
        stolen, total = (now[i] - self._start[i] for i in range(2))
        return stolen / total if total > 0 else 0.0


def _cpu_ticks() -> tuple[int, int] | None:
    """(stolen, all) CPU ticks since boot, summed over the CPUs."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal guest guest_nice; guest time is
    # already counted in user and nice.
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(value) for value in fields[1:9]]
    return ticks[7], sum(ticks)


def settled_first(runner: Callable[[int, int], R]) -> Callable[[int, int], R]:
    """`runner` once what earlier runs left is settled, whichever side's it was:
    - the page cache they dirtied (gigabytes after the highest rates) is written back
      (os.sync()), not by the kernel's flusher 30 s later in the middle of this run;
    - this process's heap (every run's figures, both sides' clients, the bench itself) is
      collected and moved out of the cyclic collector's view (gc.freeze), so the collector's
      own full collections during the run walk only what the run made. Without it, one came
      every run or two at 30,000-40,000/s and took 68-99 ms while a client was being timed,
      seglog's most (its sender is a Python thread of this process; librdkafka's threads
      are not, its delivery callbacks are): acks=all 30,000/s publish p99 52.8 ms in the run
      that had a 99 ms one, 21.7-24.9 ms in the runs after a freeze."""

    def run(acks: int, rate: int) -> R:
        os.sync()
        gc.collect()
        gc.freeze()
        return runner(acks, rate)

    return run
