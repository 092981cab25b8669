"""Where whole batches lie in a segment's `.log`, found from its indexes and a few batch
headers without reading the batches (`locate`: Kafka's LogSegment.read as a place, not
bytes), and the first record at or after a timestamp (`find_offset_by_timestamp`). The
fetch path sends a `SegmentSlice` straight from the file."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from ..errors import CorruptRecordError
from ..records.batch import HEADER_BYTES, MAGIC_V2, RecordBatch
from .batch_bounds import MAX_RELATIVE_OFFSET
from .segment import LogSegment


@dataclass(frozen=True)
class SegmentSlice:
    """Where whole batches from some offset lie in a segment's `.log`, found without reading
    them (Kafka's FetchDataInfo): `size` bytes from `position`, ending before `next_offset`."""

    segment: LogSegment
    position: int
    size: int
    first_batch_base_offset: int
    next_offset: int

    def read(self) -> bytes:
        return self.segment.log.read(self.position, self.size) if self.size else b""

    def write_to(self, out: socket.socket) -> int:
        """Send these bytes from the segment's file to `out` (sendfile, or pread+send under
        TLS: FileRecords.write_to); the bytes sent."""
        return self.segment.log.write_to(out, self.position, self.size) if self.size else 0


def locate(
    segment: LogSegment,
    start_offset: int,
    max_bytes: int,
    *,
    max_position: int | None = None,
    min_one_message: bool = False,
) -> SegmentSlice | None:
    """`read`'s answer as a place in the file, without reading the batches: the end of
    the last whole batch within `max_bytes` is found from the offset index's entry at or
    below that position and a walk over the few headers after it."""
    end = segment.log.size if max_position is None else min(max_position, segment.log.size)
    start = segment.translate_offset(start_offset)
    if start is None or start.position >= end:
        return None
    first = start.header
    if (
        first.base_offset < segment.base_offset
        or first.last_offset - segment.base_offset > MAX_RELATIVE_OFFSET
    ):
        # A batch whose offsets cannot be in this segment (a flipped bit in baseOffset,
        # which the CRC does not cover, since the segment was last checked): refuse it
        # rather than hand out records under offsets the log never had.
        raise CorruptRecordError(
            f"{segment.log.path} at byte {start.position}: baseOffset {first.base_offset}, "
            f"last offset {first.last_offset} outside the segment (base {segment.base_offset})"
        )
    if first.size_in_bytes > max_bytes:
        size = first.size_in_bytes if min_one_message else 0
        next_offset = first.next_offset if min_one_message else first.base_offset
        return SegmentSlice(segment, start.position, size, first.base_offset, next_offset)
    target = min(start.position + max_bytes, end)
    known_next = segment.append_ends.offset_after(target)
    if known_next is not None:
        # An append ended at `target` (the log end, a caught-up reader's usual bound): the
        # batches up to it are whole, and the next offset is known without a walk.
        return SegmentSlice(
            segment, start.position, target - start.position, first.base_offset, known_next
        )
    last_end = start.position + first.size_in_bytes
    next_offset = first.next_offset
    entry = segment.offset_index.floor_position(target)
    position = last_end if entry is None else max(entry.position, last_end)
    if position > last_end:
        # Every batch before an index entry's batch is whole and below `target`: the
        # slice reaches at least the entry's position, where the next batch starts.
        last_end, next_offset = position, segment.log.header_at(position).base_offset
    while position + HEADER_BYTES <= target:
        header = segment.log.header_at(position)
        if header.magic != MAGIC_V2 or position + header.size_in_bytes > target:
            break
        position += header.size_in_bytes
        last_end, next_offset = position, header.next_offset
    return SegmentSlice(
        segment, start.position, last_end - start.position, first.base_offset, next_offset
    )


def find_offset_by_timestamp(
    segment: LogSegment, timestamp_ms: int, start_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after `start_offset` whose timestamp
    >= `timestamp_ms`: the time index narrows the start, then batches whose max timestamp
    reaches the target are decoded in turn (as Kafka's FileRecords.searchForTimestamp), so
    a batch whose qualifying records all sit below `start_offset` does not end the search."""
    entry = segment.time_index.lookup(timestamp_ms)
    position = segment.offset_index.lookup(max(entry.offset, start_offset)).position
    while True:
        found = segment.log.search_timestamp(timestamp_ms, position)
        if found is None:
            return None
        if found.header.last_offset >= start_offset:
            batch = RecordBatch(segment.log.read(found.position, found.header.size_in_bytes))
            for record in batch.records():
                if record.timestamp_ms >= timestamp_ms and record.offset >= start_offset:
                    return record.offset, record.timestamp_ms
        position = found.position + found.header.size_in_bytes
