"""What a log's reads answer (LogSlice: where the bytes lie; LogReadResult: the bytes), and
lookups over its segments that read no more than they must: bytes from an offset to
the log end counted from file positions, and the offset for a timestamp (Kafka's ListOffsets)
narrowed by the segments' running maxima and their time indexes. Each works on one
`SegmentsSnapshot`, so it sees a consistent log while appends, rolls and swaps go on."""

from __future__ import annotations

from dataclasses import dataclass

from ..records.batch import NO_TIMESTAMP
from .log_segments import SegmentsSnapshot
from .segment import LogSegment
from .segment_reads import SegmentSlice, find_offset_by_timestamp


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
        found = find_offset_by_timestamp(
            segment, timestamp_ms, max(log_start_offset, segment.base_offset)
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
    found = find_offset_by_timestamp(best, best.max_timestamp_so_far, log_start_offset)
    if found is None:  # its records all lie below the log start offset
        return None
    return TimestampAndOffset(found[1], found[0])


@dataclass(frozen=True)
class Split:
    """One piece of a cut offset range: its first offset (a batch's base offset, or the
    range's start) and its size in bytes of the log."""

    start_offset: int
    size_bytes: int


def split_points(
    snapshot: SegmentsSnapshot, start_offset: int, end_offset: int, target_bytes: int
) -> list[Split]:
    """Cut [start_offset, end_offset) into pieces of about `target_bytes` (<= 0: one piece),
    at batch starts found in the sparse offset indexes; one header is read per cut, never
    the records. Pieces are equal shares of the range's bytes, each cut moved to the nearest
    indexed batch start (a segment's own start is one), so the pieces differ by at most
    about two index intervals (or batches, when batches are larger)."""
    if end_offset <= start_offset or not snapshot.segments:
        return [Split(start_offset, 0)]
    first, first_position = position_of(snapshot, start_offset)
    last, last_position = position_of(snapshot, end_offset)
    # Each segment's part of the range: (segment, lo, hi, bytes of the range before it).
    parts: list[tuple[LogSegment, int, int, int]] = []
    total = 0
    inside = False
    for segment in snapshot.segments:
        if segment is first:
            inside = True
        if not inside:
            continue
        lo = first_position if segment is first else 0
        hi = last_position if segment is last else segment.size
        if hi > lo:
            parts.append((segment, lo, hi, total))
            total += hi - lo
        if segment is last:
            break
    pieces = 1 if target_bytes <= 0 else max(1, -(-total // target_bytes))
    cuts: list[tuple[int, int]] = [(start_offset, 0)]  # (offset, bytes before it in the range)
    for k in range(1, pieces):
        ideal = total * k // pieces
        cut = _nearest_batch_start(parts, ideal)
        if cut is not None and cut[1] > cuts[-1][1] and cut[0] > cuts[-1][0]:
            cuts.append(cut)
    ends = [before for _, before in cuts[1:]] + [total]
    return [Split(offset, end - before) for (offset, before), end in zip(cuts, ends, strict=True)]


def _nearest_batch_start(
    parts: list[tuple[LogSegment, int, int, int]], ideal: int
) -> tuple[int, int] | None:
    """The indexed batch start nearest to `ideal` bytes into the range, as (its batch's base
    offset, bytes before it in the range); None when only the range's own start is near."""
    for segment, lo, hi, before in parts:
        if ideal >= before + hi - lo:
            continue
        wanted = lo + ideal - before
        candidates = [lo] if before > 0 else []  # a segment's start (not the range's)
        candidates += [p for p in segment.offset_index.positions_around(wanted) if lo < p < hi]
        if not candidates:
            return None
        position = min(candidates, key=lambda p: abs(p - wanted))
        return segment.log.header_at(position).base_offset, before + position - lo
    return None
