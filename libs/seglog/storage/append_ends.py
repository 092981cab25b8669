"""Where a segment's last few appends ended: a caught-up follower or consumer fetches from
exactly such a place, the offset after what it got last, and finds it here (one 61-byte
header read to confirm) instead of by two binary searches of the offset index and a walk of
headers, on every fetch of the node's busiest path (segment_reads.locate).

Written by the appending thread only (LogSegment.append), forgotten whenever the file is cut
(truncation, recovery, a rolled-back append) and when the segment rolls. Readers take no
lock, so what they find is confirmed against the batch header before use: a place
remembered across a cut and a refill is taken only if it still is one."""

from __future__ import annotations

from ..records.batch import HEADER_BYTES, LOG_OVERHEAD, MAGIC_V2
from .file_records import FileRecords
from .valid_prefix import BatchPosition

# Append ends remembered by the active segment: a follower fetches from the last one, a
# consumer a little behind from one of the last few. A rolled segment forgets them (a reader
# still there is behind, and the indexes find its place): what stays per partition is a few
# pairs, whatever the partition count.
RECENT_APPEND_ENDS = 4


class AppendEnds:
    def __init__(self) -> None:
        # (next offset, file position), oldest first. Replaced whole on each change, never
        # changed in place: a reader holds one consistent list.
        self._ends: tuple[tuple[int, int], ...] = ()

    def note(self, next_offset: int, position: int) -> None:
        self._ends = (*self._ends[1 - RECENT_APPEND_ENDS :], (next_offset, position))

    def forget(self) -> None:
        """The file was cut, or the segment is no longer active."""
        self._ends = ()

    def offset_after(self, position: int) -> int | None:
        """The next offset after the batches ending at `position`, when an append ended
        there recently; None otherwise."""
        for next_offset, end in reversed(self._ends):
            if end == position:
                return next_offset
        return None

    def batch_at(self, log: FileRecords, offset: int, start_position: int) -> BatchPosition | None:
        """The batch starting at `offset` in `log`, when an append ended there recently and
        its header confirms it; None otherwise."""
        position = next((end for next_offset, end in self._ends if next_offset == offset), None)
        if position is None or position < start_position:
            return None
        size = log.size
        if position + HEADER_BYTES > size:
            return None
        header = log.header_at(position)
        if (
            header.magic != MAGIC_V2
            or header.base_offset != offset
            or header.batch_length < HEADER_BYTES - LOG_OVERHEAD
            or position + header.size_in_bytes > size
        ):
            return None
        return BatchPosition(position, header)
