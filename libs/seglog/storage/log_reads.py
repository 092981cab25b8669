"""What a log's reads answer (LogSlice: where the bytes lie; LogReadResult: the bytes), and
lookups over its segments that read no more than they must: bytes from an offset to
the log end counted from file positions, and the offset for a timestamp (Kafka's ListOffsets)
narrowed by the segments' running maxima and their time indexes. Each works on one
`SegmentsSnapshot`, so it sees a consistent log while appends, rolls and swaps go on."""

from __future__ import annotations

from dataclasses import dataclass

from ..records.batch import NO_TIMESTAMP
from .log_segments import SegmentsSnapshot
from .segment import LogSegment, SegmentSlice


@dataclass(frozen=True)
class LogReadResult:
    data: bytes | memoryview
    next_offset: int  # where the next read continues (== the fetch offset when data is empty)
    high_watermark: int  # the log end offset when the read began
    log_start_offset: int


@dataclass(frozen=True)
class LogSlice:
    """A read's place in the log: whole batches in one segment's file (None: nothing to
    read), where the next read continues, and the watermarks when it was found."""

    segment_slice: SegmentSlice | None
    next_offset: int  # == the fetch offset when there is nothing to read
    high_watermark: int
    log_start_offset: int

    @property
    def size(self) -> int:
        return 0 if self.segment_slice is None else self.segment_slice.size

    def read(self) -> bytes:
        return b"" if self.segment_slice is None else self.segment_slice.read()


@dataclass(frozen=True)
class ReadPosition:
    """Where a read at some offset starts (its batch's segment and file position) and the
    bytes from there to the log end."""

    segment: LogSegment
    position: int
    available_bytes: int


@dataclass(frozen=True)
class TimestampAndOffset:
    timestamp_ms: int
    offset: int


def bytes_from(snapshot: SegmentsSnapshot, offset: int, hint: ReadPosition | None) -> ReadPosition:
    segments = snapshot.segments
    if hint is not None and any(s is hint.segment for s in segments):
        segment, position = hint.segment, hint.position
    else:
        index = snapshot.floor_index(offset)
        segment, position = segments[index], segments[index].size
        for candidate in segments[index:]:
            found = candidate.translate_offset(offset)
            if found is not None:
                segment, position = candidate, found.position
                break
    after = False
    available = 0
    for s in segments:
        if s is segment:
            available, after = s.size - position, True
        elif after:
            available += s.size
    return ReadPosition(segment, position, max(available, 0))


def position_of(snapshot: SegmentsSnapshot, offset: int) -> tuple[LogSegment, int]:
    """The segment and file position of the batch holding `offset` (the segment's end when
    it lies past its last batch): where a read bounded at `offset` stops."""
    segment = snapshot.segments[snapshot.floor_index(offset)]
    found = segment.translate_offset(offset)
    return segment, segment.size if found is None else found.position


def offset_for_timestamp(
    snapshot: SegmentsSnapshot, timestamp_ms: int, log_start_offset: int
) -> TimestampAndOffset | None:
    """The first record at or after the log start whose timestamp >= `timestamp_ms`."""
    for segment in snapshot.segments:
        if segment.size == 0 or segment.max_timestamp_so_far < timestamp_ms:
            continue
        found = segment.find_offset_by_timestamp(
            timestamp_ms, max(log_start_offset, segment.base_offset)
        )
        if found is not None:
            return TimestampAndOffset(found[1], found[0])
    return None


def offset_of_max_timestamp(
    snapshot: SegmentsSnapshot, log_start_offset: int
) -> TimestampAndOffset | None:
    """The record holding the log's largest timestamp (the first such when several tie),
    as Kafka answers ListOffsets MAX_TIMESTAMP: the segment with the largest timestamp from
    the segments' running maxima, then its one batch decoded."""
    best: LogSegment | None = None
    for segment in snapshot.segments:
        if segment.size and segment.max_timestamp_so_far > (
            best.max_timestamp_so_far if best is not None else NO_TIMESTAMP
        ):
            best = segment
    if best is None:
        return None
    found = best.find_offset_by_timestamp(best.max_timestamp_so_far, log_start_offset)
    if found is None:  # its records all lie below the log start offset
        return None
    return TimestampAndOffset(found[1], found[0])
