"""How the benchmarks time a figure and its baseline on a shared, noisy machine."""

from __future__ import annotations

from collections.abc import Callable


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
