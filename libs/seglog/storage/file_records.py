"""FileRecords: a `.log` file (or a slice of one) holding whole batches back to back.

Watermark: `size` is the number of bytes appended and visible to readers. It only moves
forward after the bytes are in the file (written to the page cache), so a reader that bounds
itself by a snapshot of `size` always sees a consistent prefix of whole batches while a
writer appends. Durability is the caller's business (`flush`).

Reads go through `os.pread` and bulk transfers through `os.sendfile` (Kafka's transferTo):
the bytes on disk are the bytes on the wire. A read that comes back short means the file was
truncated underneath the reader: that raises, it never returns a partial batch as data.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import CorruptRecordError, LogClosedError, StorageError
from ..records.batch import (
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    BatchHeader,
    check_header,
    compute_crc,
)

_LENGTH_AND_MAGIC = struct.Struct(">qi")
# Recovery and scans read the file in chunks of this size: large enough that per-call costs
# vanish against a 1 GiB segment, small enough to stay well inside memory.
SCAN_CHUNK_BYTES = 8 * 1024 * 1024
# A search starts at an index entry and the next entry is index_interval_bytes (4096) on:
# reading a few intervals per call finds the batch in one read almost always.
SEARCH_CHUNK_BYTES = 16 * 1024
# IOV_MAX on Linux is 1024; stay under it per writev call.
_IOV_MAX = 1000


class BatchPosition(NamedTuple):
    position: int
    header: BatchHeader


class FileRecords:
    """An open `.log` file. `start`/`end` make a slice: a view sharing the descriptor."""

    def __init__(self, path: Path, fd: int, size: int, *, start: int = 0, is_slice: bool = False):
        self.path = path
        self._fd = fd
        self._size = size
        self._start = start
        self._is_slice = is_slice

    @classmethod
    def open(cls, path: Path, *, create: bool = True) -> FileRecords:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        return cls(path, fd, os.fstat(fd).st_size)

    @property
    def size(self) -> int:
        return self._size

    @property
    def fd(self) -> int:
        if self._fd < 0:
            raise LogClosedError(f"{self.path} is closed")
        return self._fd

    def append(self, buffers: Sequence[bytes | bytearray | memoryview]) -> int:
        """Write the buffers at the end with as few syscalls as possible; return bytes written.

        On an I/O error (disk full) the file is cut back to its size before the call and the
        error is raised as StorageError: no partial batch is left behind.
        """
        fd = self.fd
        position = self._size
        written = 0
        try:
            for i in range(0, len(buffers), _IOV_MAX):
                chunk = buffers[i : i + _IOV_MAX]
                expected = sum(map(len, chunk))
                n = os.pwritev(fd, chunk, position + written)
                if n != expected:  # short write: finish it byte-exactly
                    n += self._finish_short_write(chunk, n, position + written)
                written += n
        except OSError as exc:
            self._cut_back(position)
            raise StorageError(
                f"append to {self.path} at position {position} failed: {exc}"
            ) from exc
        self._size = position + written
        return written

    def _finish_short_write(
        self, chunk: Sequence[bytes | bytearray | memoryview], done: int, at: int
    ) -> int:
        joined = memoryview(b"".join(bytes(b) for b in chunk))[done:]
        extra = 0
        while extra < len(joined):
            n = os.pwrite(self.fd, joined[extra:], at + done + extra)
            if n <= 0:
                raise OSError(f"pwrite wrote {n} bytes")
            extra += n
        return extra

    def _cut_back(self, size: int) -> None:
        try:
            os.ftruncate(self.fd, size)
        except OSError:
            pass  # the original error is the one to report

    def read(self, position: int, size: int) -> bytes:
        """Exactly `size` bytes at `position` (relative to this slice)."""
        if position < 0 or size < 0 or position + size > self._size:
            raise CorruptRecordError(
                f"read of {size} bytes at position {position} outside {self.path} "
                f"(size {self._size})"
            )
        data = os.pread(self.fd, size, self._start + position)
        if len(data) != size:
            raise CorruptRecordError(
                f"{self.path} was truncated underneath a reader: asked {size} bytes at "
                f"{self._start + position}, got {len(data)}"
            )
        return data

    def slice(self, position: int, size: int) -> FileRecords:
        """A view of [position, position + size) sharing this file's descriptor."""
        if position < 0 or size < 0 or position + size > self._size:
            raise AssertionError(  # a programmer error, not corrupt data
                f"slice [{position}, {position + size}) outside {self.path} (size {self._size})"
            )
        return FileRecords(self.path, self.fd, size, start=self._start + position, is_slice=True)

    def read_all(self) -> bytes:
        return self.read(0, self._size)

    def write_to(
        self,
        out: int | socket.socket,
        position: int = 0,
        length: int | None = None,
        *,
        fd: int | None = None,
    ) -> int:
        """Copy [position, position + length) to a descriptor or socket with `os.sendfile`
        (no user-space copy). `fd`, a duplicate of this file's descriptor, keeps the file
        open for the transfer whatever happens to this object meanwhile."""
        if length is None:
            length = self._size - position
        if position < 0 or position + length > self._size:
            raise AssertionError(f"write_to range outside {self.path} (size {self._size})")
        out_fd = out.fileno() if isinstance(out, socket.socket) else out
        in_fd = self.fd if fd is None else fd
        sent = 0
        offset = self._start + position
        while sent < length:
            n = os.sendfile(out_fd, in_fd, offset + sent, length - sent)
            if n == 0:
                raise CorruptRecordError(
                    f"{self.path} was truncated underneath a transfer at {offset + sent}"
                )
            sent += n
        return sent

    def header_at(self, position: int) -> BatchHeader:
        data = self.read(position, HEADER_BYTES)
        return BatchHeader._make(HEADER.unpack(data))

    def batches(
        self,
        start_position: int = 0,
        end_position: int | None = None,
        *,
        chunk_bytes: int = SCAN_CHUNK_BYTES,
    ) -> Iterator[BatchPosition]:
        """Headers of the whole v2 batches in [start, end), read in chunks; CRCs not checked.

        Stops at the first entry that is not a plausible whole v2 batch; `scan_valid_prefix`
        is the strict walk recovery uses.
        """
        end = self._size if end_position is None else end_position
        position = start_position
        while position + HEADER_BYTES <= end:
            chunk = self.read(position, min(chunk_bytes, end - position))
            pos = 0
            while pos + HEADER_BYTES <= len(chunk):
                header = BatchHeader._make(HEADER.unpack_from(chunk, pos))
                if header.magic != MAGIC_V2 or header.batch_length < HEADER_BYTES - LOG_OVERHEAD:
                    return
                if position + pos + header.size_in_bytes > end:
                    return
                yield BatchPosition(position + pos, header)
                pos += header.size_in_bytes
            if pos == 0:  # a batch larger than the chunk: step over it with a direct read
                header = self.header_at(position)
                if position + header.size_in_bytes > end:
                    return
                yield BatchPosition(position, header)
                pos = header.size_in_bytes
            position += pos

    def scan_valid_prefix(self, base_offset: int) -> Iterator[BatchPosition]:
        """Yield the batches that recovery keeps: whole, v2, CRC-valid, offsets increasing.

        The walk stops at the first batch that fails; the caller cuts the file there.
        """
        position = 0
        next_offset = base_offset
        end = self._size
        while position + HEADER_BYTES <= end:
            chunk = self.read(position, min(SCAN_CHUNK_BYTES, end - position))
            pos = 0
            view = memoryview(chunk)
            while pos + LOG_OVERHEAD <= len(chunk):
                _, length = _LENGTH_AND_MAGIC.unpack_from(chunk, pos)
                size = length + LOG_OVERHEAD
                if pos + HEADER_BYTES > len(chunk) or pos + size > len(chunk):
                    break
                header = self._valid_header(view, pos, position + pos, next_offset)
                if header is None:
                    return
                yield BatchPosition(position + pos, header)
                next_offset = header.next_offset
                pos += size
            if pos == 0:
                header = self._large_batch(position, next_offset)
                if header is None:
                    return
                yield BatchPosition(position, header)
                next_offset = header.next_offset
                pos = header.size_in_bytes
            position += pos

    def _large_batch(self, position: int, next_offset: int) -> BatchHeader | None:
        if position + HEADER_BYTES > self._size:
            return None
        header = self.header_at(position)
        if (
            header.batch_length < HEADER_BYTES - LOG_OVERHEAD
            or position + header.size_in_bytes > self._size
        ):
            return None
        data = self.read(position, header.size_in_bytes)
        return self._valid_header(memoryview(data), 0, position, next_offset)

    @staticmethod
    def _valid_header(
        view: memoryview, pos: int, file_position: int, next_offset: int
    ) -> BatchHeader | None:
        if view[pos + MAGIC_OFFSET] != MAGIC_V2:
            return None
        header = BatchHeader._make(HEADER.unpack_from(view, pos))
        try:
            check_header(header, file_position)
        except Exception:
            return None
        if header.base_offset < next_offset:
            return None
        if compute_crc(view, pos, header.size_in_bytes) != header.crc:
            return None
        return header

    def search_offset(self, target_offset: int, start_position: int) -> BatchPosition | None:
        """The first batch at or after `start_position` whose last offset >= target. Large
        batches are stepped over header by header (61 bytes read each); once they are small,
        one chunk read walks many at once. Either way the records themselves are not read
        when the batches are large (a sendfile transfer then copies nothing)."""
        position = start_position
        while position + HEADER_BYTES <= self._size:
            header = self.header_at(position)
            if (
                header.magic != MAGIC_V2
                or header.batch_length < HEADER_BYTES - LOG_OVERHEAD
                or position + header.size_in_bytes > self._size
            ):
                return None
            if header.last_offset >= target_offset:
                return BatchPosition(position, header)
            position += header.size_in_bytes
            if header.size_in_bytes < SEARCH_CHUNK_BYTES // 4:
                break  # small batches: walk them from a chunk
        for found in self.batches(position, chunk_bytes=SEARCH_CHUNK_BYTES):
            if found.header.last_offset >= target_offset:
                return found
        return None

    def search_timestamp(self, target_ms: int, start_position: int) -> BatchPosition | None:
        """The first batch at or after `start_position` whose max timestamp >= target."""
        for found in self.batches(start_position, chunk_bytes=SEARCH_CHUNK_BYTES):
            if found.header.max_timestamp >= target_ms:
                return found
        return None

    def truncate_to(self, size: int) -> int:
        """Cut the file to `size` bytes; return how many bytes were cut."""
        if size < 0 or size > self._size:
            raise AssertionError(  # a programmer error, not corrupt data
                f"cannot truncate {self.path} (size {self._size}) to {size} bytes"
            )
        cut = self._size - size
        if cut:
            os.ftruncate(self.fd, size)
            self._size = size
        return cut

    def flush(self) -> None:
        os.fdatasync(self.fd)

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def close(self) -> None:
        if self._fd >= 0 and not self._is_slice:
            os.close(self._fd)
        self._fd = -1

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
