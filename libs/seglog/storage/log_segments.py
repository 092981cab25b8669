"""LogSegments: the sorted segments of one log (Kafka's LogSegments).

Copy-on-write: every change builds a new (segments, base offsets) pair and publishes it with
one assignment, so readers take `snapshot()` without a lock and always see a consistent pair
while appends, rolls, retention and the cleaner's swap change the log. Writers hold the
log's lock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from .segment import LogSegment


@dataclass(frozen=True)
class SegmentsSnapshot:
    segments: tuple[LogSegment, ...]
    base_offsets: tuple[int, ...]

    def floor_index(self, offset: int) -> int:
        """Index of the segment that would hold `offset` (the first one when below all)."""
        return max(bisect.bisect_right(self.base_offsets, offset) - 1, 0)

    def contains(self, segment: LogSegment) -> bool:
        return any(s is segment for s in self.segments)

    def upper_bound_of(self, index: int) -> int | None:
        """The next segment's base offset: every offset of segment `index` is below it."""
        return self.base_offsets[index + 1] if index + 1 < len(self.base_offsets) else None


class LogSegments:
    def __init__(self, segments: Iterable[LogSegment] = ()) -> None:
        self._snapshot = SegmentsSnapshot((), ())
        self.set(segments)

    def snapshot(self) -> SegmentsSnapshot:
        return self._snapshot

    def set(self, segments: Iterable[LogSegment]) -> None:
        ordered = tuple(sorted(segments, key=lambda s: s.base_offset))
        self._snapshot = SegmentsSnapshot(ordered, tuple(s.base_offset for s in ordered))

    def add(self, segment: LogSegment) -> None:
        self.set([*self._snapshot.segments, segment])

    def replace(self, new: Sequence[LogSegment], old: Sequence[LogSegment]) -> None:
        old_ids = {id(s) for s in old}
        self.set([*(s for s in self._snapshot.segments if id(s) not in old_ids), *new])

    def remove(self, doomed: Sequence[LogSegment]) -> None:
        self.replace([], doomed)

    def contains(self, segment: LogSegment) -> bool:
        return any(s is segment for s in self._snapshot.segments)

    @property
    def first(self) -> LogSegment:
        return self._snapshot.segments[0]

    @property
    def active(self) -> LogSegment:
        return self._snapshot.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._snapshot.segments)

    def as_list(self) -> list[LogSegment]:
        return list(self._snapshot.segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._snapshot.segments)

    def __len__(self) -> int:
        return len(self._snapshot.segments)
