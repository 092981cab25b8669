"""Where a segment's last few appends ended: a caught-up follower or consumer fetches from
exactly such a place, the offset after what it got last, and finds it here (one 61-byte
header read to confirm) instead of by two binary searches of the offset index and a walk of
headers, on every fetch of the node's busiest path (segment_reads.locate).

Written by the appending thread only (LogSegment.append), forgotten whenever the file is cut
(truncation, recovery, a rolled-back append). Readers take no lock, so what they find is
confirmed against the batch header before use: a place remembered across a cut and a refill
is taken only if it still is one."""

from __future__ import annotations

from ..records.batch import HEADER_BYTES, LOG_OVERHEAD, MAGIC_V2
from .file_records import FileRecords
from .valid_prefix import BatchPosition

# Append ends remembered per segment: the followers' and consumers' next fetch offsets.
RECENT_APPEND_ENDS = 16


class AppendEnds:
    def __init__(self) -> None:
        self._position_of_offset: dict[int, int] = {}  # next offset -> file position
        self._offset_at_position: dict[int, int] = {}  # and back

    def note(self, next_offset: int, position: int) -> None:
        if len(self._position_of_offset) >= RECENT_APPEND_ENDS:
            oldest = next(iter(self._position_of_offset))  # dicts keep insertion order
            self._offset_at_position.pop(self._position_of_offset.pop(oldest), None)
        self._position_of_offset[next_offset] = position
        self._offset_at_position[position] = next_offset

    def forget(self) -> None:
        """The file was cut: a remembered place may no longer be one."""
        self._position_of_offset.clear()
        self._offset_at_position.clear()

    def offset_after(self, position: int) -> int | None:
        """The next offset after the batches ending at `position`, when an append ended
        there recently; None otherwise."""
        return self._offset_at_position.get(position)

    def batch_at(self, log: FileRecords, offset: int, start_position: int) -> BatchPosition | None:
        """The batch starting at `offset` in `log`, when an append ended there recently and
        its header confirms it; None otherwise."""
        position = self._position_of_offset.get(offset)
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
