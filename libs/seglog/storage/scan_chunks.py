"""The chunks recovery's walk over a `.log` reads (`ScanChunks`), each next one read by a
second thread while the walk checks the current one.

Recovery is a read and a CRC-32C of every byte. Both release the GIL (the read is a
`preadv`; the CRC, `_scan.crc32c`, for inputs of 64 KiB or more), so with the next chunk's
read under way while this one's CRCs are computed, a segment recovers in about the time of
its read alone rather than the sum of the two.

The walk asks for the bytes from a position; a chunk ends inside a batch, so the next
position lies inside the chunk before (the partial batch there). Chunks are therefore read
at fixed file positions into the upper half of a buffer twice their size, and the walk's
left-over bytes (the partial batch, at most a half) are copied in front of them: the walk
sees one contiguous view. A position past the last chunk (a batch larger than a chunk,
which the walk reads alone) starts the stream again there.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .file_records import FileRecords


class ScanChunks:
    def __init__(self, records: FileRecords, chunk_bytes: int) -> None:
        self._records = records
        self._end = records.size
        self._chunk_bytes = max(min(chunk_bytes, self._end), 1)
        self._buffers = (bytearray(2 * self._chunk_bytes), bytearray(2 * self._chunk_bytes))
        self._current = 0  # the buffer the walk's view is in
        # The view last returned, and the file position of its first byte.
        self._view: memoryview | None = None
        self._view_position = 0
        # A segment of one chunk needs no second thread.
        self._reader = (
            ThreadPoolExecutor(1, thread_name_prefix="seglog-recovery-read")
            if self._end > self._chunk_bytes
            else None
        )
        self._ahead: tuple[int, Future[memoryview]] | None = None  # (file position, read)

    def __enter__(self) -> ScanChunks:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead[1].cancel()
            self._ahead = None
        if self._reader is not None:
            self._reader.shutdown(wait=True)
        self._view = None

    def at(self, position: int) -> memoryview:
        """The bytes from `position` on, up to about two chunks (fewer at the file's end)."""
        view, start = self._view, self._view_position
        file_position = start + len(view) if view is not None else -1
        left = file_position - position
        if view is None or not 0 <= left <= self._chunk_bytes or file_position >= self._end:
            self._cancel_ahead()
            other = self._other()
            fresh = self._records.read_into(position, memoryview(other)[: self._chunk_bytes])
            return self._hand_out(fresh, position)
        other = self._other()
        ahead = self._take_ahead(file_position, other)
        # The partial batch left over goes just in front of the chunk read behind it.
        other[self._chunk_bytes - left : self._chunk_bytes] = view[len(view) - left :]
        whole = memoryview(other)[self._chunk_bytes - left : self._chunk_bytes + len(ahead)]
        return self._hand_out(whole, position)

    def _other(self) -> bytearray:
        return self._buffers[1 - self._current]

    def _hand_out(self, view: memoryview, position: int) -> memoryview:
        """`view`, in the buffer that was the other one, becomes the walk's; the next chunk
        is read ahead into the buffer the walk leaves."""
        self._current = 1 - self._current
        self._view, self._view_position = view, position
        self._read_ahead(position + len(view))
        return view

    def _read_ahead(self, file_position: int) -> None:
        """Start reading the chunk at `file_position` into the buffer not handed out."""
        if self._reader is None or file_position >= self._end:
            return
        target = memoryview(self._other())[self._chunk_bytes :]
        self._ahead = (
            file_position,
            self._reader.submit(self._records.read_into, file_position, target),
        )

    def _take_ahead(self, file_position: int, into: bytearray) -> memoryview:
        if self._ahead is not None and self._ahead[0] == file_position:
            future = self._ahead[1]
            self._ahead = None
            return future.result()
        self._cancel_ahead()
        return self._records.read_into(file_position, memoryview(into)[self._chunk_bytes :])

    def _cancel_ahead(self) -> None:
        if self._ahead is not None:
            future = self._ahead[1]
            self._ahead = None
            if not future.cancel():
                future.exception()  # wait: the read is writing into a buffer about to be used
