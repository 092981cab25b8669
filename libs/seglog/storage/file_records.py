"""FileRecords: a `.log` file (or a slice of one) holding whole batches back to back.

Watermark: `size` is the number of bytes appended and visible to readers. It only moves
forward after the bytes are in the file (written to the page cache), so a reader that bounds
itself by a snapshot of `size` always sees a consistent prefix of whole batches while a
writer appends. Durability is the caller's business (`flush`).

Reads go through `os.pread` and bulk transfers through `os.sendfile` (Kafka's transferTo):
the bytes on disk are the bytes on the wire (over TLS, a pread+send loop: `write_to`). A read
that comes back short means the file was truncated underneath the reader: that raises, it
never returns a partial batch as data.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import NoReturn

from ..errors import CorruptRecordError, LogClosedError, StorageError
from ..records._scan import write_batches
from ..records.batch import (
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
)
from .open_files import OpenFileCache
from .valid_prefix import SCAN_CHUNK_BYTES, BatchPosition, ValidPrefix, scan_valid_prefix

# A search starts at an index entry and the next entry is index_interval_bytes (4096) on:
# reading a few intervals per call finds the batch in one read almost always.
SEARCH_CHUNK_BYTES = 16 * 1024
# IOV_MAX on Linux is 1024; stay under it per writev call.
_IOV_MAX = 1000
# A transfer to a TLS socket goes through a buffer this large (the ssl module cuts it into
# 16 KiB records). Measured over loopback TLS: ~150 MB/s in the 8 KiB blocks of the ssl
# module's own sendfile fallback, 270-390 MB/s with 256 KiB.
TLS_CHUNK_BYTES = 256 * 1024


class FileRecords:
    """A `.log` file. Its descriptor is open while the segment is active; an old segment's
    (`park_when_idle`) is opened on use and closed by the node's OpenFileCache when idle.
    Every use of the descriptor pins it (`_pinned`), so it is never closed under a reader."""

    def __init__(
        self, path: Path, fd: int, size: int, *, start: int = 0, parent: FileRecords | None = None
    ):
        self.path = path
        self._start = start
        self._parent = parent  # a slice's file: it pins and owns the descriptor
        self._fd = fd  # -1 while parked (closed for idleness) or closed
        self._size = size
        self._lock = threading.Lock()
        self._pins = 0
        self._closed = False
        self._open_files: OpenFileCache | None = None  # set while it may be parked
        self._on_park: Callable[[], object] | None = None

    @classmethod
    def open(cls, path: Path, *, create: bool = True) -> FileRecords:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        return cls(path, fd, os.fstat(fd).st_size)

    @property
    def size(self) -> int:
        return self._size

    @property
    def is_open(self) -> bool:
        """Holds a descriptor now (parked and closed files do not)."""
        return self._fd >= 0

    # -- descriptor lifetime -------------------------------------------------------------

    def park_when_idle(
        self, open_files: OpenFileCache, on_park: Callable[[], object] | None = None
    ) -> None:
        """The segment became old: its descriptor may be closed when idle, and then
        `on_park` runs (the segment unmaps its indexes with it)."""
        with self._lock:
            self._open_files = open_files
            self._on_park = on_park
            is_open = self._fd >= 0
        if is_open:
            open_files.used(self)

    def keep_open(self) -> None:
        """The segment takes appends again (a truncation made it active): open for good."""
        with self._lock:
            cache, self._open_files = self._open_files, None
        if cache is not None:
            cache.forget(self)

    def park(self) -> bool:
        with self._lock:
            if self._pins or self._open_files is None:
                return self._fd < 0
            was_open = self._fd >= 0
            if was_open:
                os.close(self._fd)
                self._fd = -1
            on_park = self._on_park
        if was_open and on_park is not None:
            on_park()
        return True

    def _pin(self) -> int:
        """The descriptor, open (again, when parked) and not closable until `_unpin`.
        (Methods, not a context manager, on the read and append paths: a generator-based
        one cost a few microseconds a call.)"""
        if self._parent is not None:
            return self._parent._pin()
        with self._lock:
            if self._closed:
                raise LogClosedError(f"{self.path} is closed")
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDWR)
            self._pins += 1
            return self._fd

    def _unpin(self) -> None:
        if self._parent is not None:
            self._parent._unpin()
            return
        with self._lock:
            self._pins -= 1
            cache = self._open_files if self._pins == 0 else None
            close_now = self._closed and self._pins == 0 and self._fd >= 0
            if close_now:
                os.close(self._fd)
                self._fd = -1
        if cache is not None and not close_now:
            cache.used(self)

    @contextmanager
    def _pinned(self) -> Iterator[int]:
        fd = self._pin()
        try:
            yield fd
        finally:
            self._unpin()

    def pinned(self) -> AbstractContextManager[int]:
        """Hold the descriptor open across several calls (tests, and a caller that must
        see one open file throughout)."""
        return self._pinned()

    def append(self, buffers: Sequence[bytes | bytearray | memoryview]) -> int:
        """Write the buffers at the end with as few syscalls as possible; return bytes written.

        On an I/O error (disk full) the file is cut back to its size before the call and the
        error is raised as StorageError: no partial batch is left behind.
        """
        position = self._size
        written = 0
        fd = self._pin()
        try:
            for i in range(0, len(buffers), _IOV_MAX):
                chunk = buffers[i : i + _IOV_MAX]
                expected = sum(map(len, chunk))
                n = os.pwritev(fd, chunk, position + written)
                if n != expected:  # short write: finish it byte-exactly
                    n += self._finish_short_write(fd, chunk, n, position + written)
                written += n
        except OSError as exc:
            self._cut_back(fd, position)
            raise StorageError(
                f"append to {self.path} at position {position} failed: {exc}"
            ) from exc
        finally:
            self._unpin()
        self._size = position + written
        return written

    def append_batches(
        self, view: memoryview, table: bytes, first_offset: int, leader_epoch: int | None
    ) -> int:
        """Write the scanned batches of `view` at the end (records/batch_table.py), with
        offsets from `first_offset` on and `leader_epoch` (None: each batch's own) in their
        prefixes: records/_scan.c's write_batches, in pwritev calls without the GIL and
        without a Python object per batch. As `append` on an I/O error."""
        position = self._size
        fd = self._pin()
        try:
            written = write_batches(fd, position, view, table, first_offset, leader_epoch)
        except OSError as exc:
            self._cut_back(fd, position)
            raise StorageError(
                f"append to {self.path} at position {position} failed: {exc}"
            ) from exc
        finally:
            self._unpin()
        self._size = position + written
        return written

    def _finish_short_write(
        self, fd: int, chunk: Sequence[bytes | bytearray | memoryview], done: int, at: int
    ) -> int:
        joined = memoryview(b"".join(bytes(b) for b in chunk))[done:]
        extra = 0
        while extra < len(joined):
            n = os.pwrite(fd, joined[extra:], at + done + extra)
            if n <= 0:
                raise OSError(f"pwrite wrote {n} bytes")
            extra += n
        return extra

    def _cut_back(self, fd: int, size: int) -> None:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass  # the original error is the one to report

    def read(self, position: int, size: int) -> bytes:
        """Exactly `size` bytes at `position`."""
        if position < 0 or size < 0 or position + size > self._size:
            raise CorruptRecordError(
                f"read of {size} bytes at position {position} outside {self.path} "
                f"(size {self._size})"
            )
        fd = self._pin()
        try:
            data = os.pread(fd, size, self._start + position)
        finally:
            self._unpin()
        if len(data) != size:
            raise CorruptRecordError(
                f"{self.path} was truncated underneath a reader: asked {size} bytes at "
                f"{self._start + position}, got {len(data)}"
            )
        return data

    def slice(self, position: int, size: int) -> FileRecords:
        """A view of [position, position + size) using this file's descriptor (and pins)."""
        if position < 0 or size < 0 or position + size > self._size:
            raise AssertionError(  # a programmer error, not corrupt data
                f"slice [{position}, {position + size}) outside {self.path} (size {self._size})"
            )
        return FileRecords(
            self.path, -1, size, start=self._start + position, parent=self._parent or self
        )

    def read_all(self) -> bytes:
        return self.read(0, self._size)

    def write_to(self, out: socket.socket, position: int = 0, length: int | None = None) -> int:
        """Send [position, position + length) of this file to a socket (Kafka's
        FileRecords.writeTo): with `os.sendfile` to a plain socket, no user-space copy; to a
        TLS socket, which must encrypt in user space (no kernel TLS here), by a pread+send
        loop. Either way from a duplicate of the file's descriptor, which keeps the file open
        until the transfer is done whatever happens to this object meanwhile (a segment
        removed by retention mid-transfer closes its file after file.delete.delay.ms; an
        old segment's file may be closed for idleness by the OpenFileCache at any time).
        CorruptRecordError when the file ends before the range does (truncated under it)."""
        if length is None:
            length = self._size - position
        if position < 0 or length < 0 or position + length > self._size:
            raise AssertionError(f"write_to range outside {self.path} (size {self._size})")
        with self._pinned() as fd:
            held = os.dup(fd)  # the transfer's own: the file may be parked meanwhile
        try:
            if isinstance(out, ssl.SSLSocket):
                sent = self._send_through_tls(out, held, self._start + position, length)
            else:
                sent = self._sendfile(out, held, self._start + position, length)
        finally:
            os.close(held)
        return sent

    def _sendfile(self, out: socket.socket, fd: int, offset: int, length: int) -> int:
        out_fd = out.fileno()
        sent = 0
        while sent < length:
            n = os.sendfile(out_fd, fd, offset + sent, length - sent)
            if n == 0:
                self._truncated_under_transfer(offset + sent)
            sent += n
        return sent

    def _send_through_tls(self, out: ssl.SSLSocket, fd: int, offset: int, length: int) -> int:
        """pread, never read: a duplicated descriptor shares its file position with every
        other duplicate, so two transfers of one file at once (two consumers, or a consumer
        and a follower) would move each other's position and send each other's bytes."""
        buffer = memoryview(bytearray(min(length, TLS_CHUNK_BYTES)))
        sent = 0
        while sent < length:
            n = os.preadv(fd, [buffer[: length - sent]], offset + sent)
            if n == 0:
                self._truncated_under_transfer(offset + sent)
            out.sendall(buffer[:n])
            sent += n
        return sent

    def _truncated_under_transfer(self, offset: int) -> NoReturn:
        raise CorruptRecordError(f"{self.path} was truncated underneath a transfer at {offset}")

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

    def scan_valid_prefix(self, base_offset: int, upper_bound: int | None = None) -> ValidPrefix:
        """The batches that recovery keeps (valid_prefix.scan_valid_prefix)."""
        return scan_valid_prefix(self, base_offset, upper_bound)

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
            with self._pinned() as fd:
                os.ftruncate(fd, size)
            self._size = size
        return cut

    def flush(self) -> None:
        with self._pinned() as fd:
            os.fdatasync(fd)

    def rename_to(self, path: Path) -> None:
        with self._lock:  # a parked file reopens by path under this lock
            os.replace(self.path, path)
            self.path = path

    def close(self) -> None:
        """Close for good; a descriptor pinned by a reader closes when its last pin goes."""
        if self._parent is not None:
            return  # a slice owns nothing
        with self._lock:
            self._closed = True
            cache, self._open_files = self._open_files, None
            if self._fd >= 0 and self._pins == 0:
                os.close(self._fd)
                self._fd = -1
        if cache is not None:
            cache.forget(self)

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
