"""A share partition's in-flight window as runs of offsets: each run a range with one state,
delivery count, holder and lock deadline (Kafka's SharePartition keeps InFlightBatch per
fetched batch the same way, and splits one into per-offset state only when acknowledgements
differ within it; here a run is split into smaller runs instead, never into single offsets
unless the acknowledgements are per offset).

The runs are kept sorted and contiguous: they cover [start offset, end offset) exactly, so a
lookup is a bisect and a change to a range cuts at most two runs and touches the runs inside
it. Nothing here loops over offsets; costs grow with the number of runs (bounded by the
in-flight window, group.share.partition.max.record.locks), never with records.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(slots=True)
class Run:
    first: int
    last: int
    state: int
    count: int  # deliveries so far (0: never delivered)
    member: str = ""  # the holder, while ACQUIRED
    deadline: float = 0.0  # monotonic seconds the lock lapses at, while ACQUIRED

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def joins(self, other: Run) -> bool:
        """Whether `other`, right after this run, can be one run with it."""
        return (
            self.last + 1 == other.first
            and self.state == other.state
            and self.count == other.count
            and self.member == other.member
            and self.deadline == other.deadline
        )

    def copy(self) -> Run:
        return Run(self.first, self.last, self.state, self.count, self.member, self.deadline)


def _first_of(run: Run) -> int:
    return run.first


class OffsetRuns:
    def __init__(self, runs: list[Run] | None = None) -> None:
        self.runs: list[Run] = runs if runs is not None else []

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def copy(self) -> OffsetRuns:
        return OffsetRuns([run.copy() for run in self.runs])

    def find(self, offset: int) -> Run | None:
        index = bisect_right(self.runs, offset, key=_first_of) - 1
        if index >= 0 and self.runs[index].last >= offset:
            return self.runs[index]
        return None

    def cut(self, offset: int) -> int:
        """Split the run holding `offset` so that one starts there; the index of the first
        run starting at or after `offset` (len(runs) when none does)."""
        index = bisect_right(self.runs, offset, key=_first_of) - 1
        if index < 0:
            return 0
        run = self.runs[index]
        if run.first == offset:
            return index
        if run.last < offset:
            return index + 1
        tail = run.copy()
        tail.first, run.last = offset, offset - 1
        self.runs.insert(index + 1, tail)
        return index + 1

    def span(self, first: int, last: int) -> tuple[int, int]:
        """Cut at both ends of [first, last]: the runs inside it are runs[i:j]."""
        i = self.cut(first)
        return i, self.cut(last + 1)

    def append(self, run: Run) -> None:
        """Add a run right after the last one (merged into it when they are alike)."""
        if self.runs and self.runs[-1].joins(run):
            self.runs[-1].last = run.last
        else:
            self.runs.append(run)

    def coalesce(self, i: int, j: int) -> None:
        """Merge alike neighbours among runs[i-1:j+1] (after a change to runs[i:j])."""
        k = min(j, len(self.runs) - 1)
        while k > max(i - 1, 0):
            before, run = self.runs[k - 1], self.runs[k]
            if before.joins(run):
                before.last = run.last
                del self.runs[k]
            k -= 1

    def drop_front(self, count: int) -> None:
        del self.runs[:count]
