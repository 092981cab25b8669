"""AbstractIndex: the entry-agnostic half of `.index` and `.timeindex` files.

An index file is an array of fixed-size big-endian entries. A writable index (the active
segment's, or one being rebuilt) is preallocated to `max_index_bytes` (10 MiB by default,
rounded down to whole entries) so appends never grow the file, and trimmed to its real size
when its segment rolls or closes.

Lazy, as Kafka's LazyIndex: constructing an index touches nothing on disk. The file is
stat'ed and mapped on first use (a lookup, an append, a flush, a sanity check), and created
only by the first entry written or by `close` (which leaves an empty file for a segment
holding data, so a cleanly closed directory has Kafka's three files per such segment). A
partition that sits idle, and every old segment nobody reads, costs no mapping and no
descriptor; a new partition costs one file (its `.log`) instead of three.

Lookups read through a read-only shared mapping (FileMapping, which holds no descriptor).
Entries are written with `pwrite` and the map sees them through the shared page cache.
Measured here, the first store through a fresh mapping into the preallocated file's hole cost
~2 ms (the page comes in through the fault path), against ~10 us for a `pwrite` of the same
entry: a new segment's first index entries through the map made a 256 MiB run of 1 MiB
appends 7% slower. The descriptor that writes (and resizes, fsyncs) is opened on first need
and kept among the node's OpenFileCache: a busy partition's index keeps it (opening the file
for each write made an append of 5 KB batches, one entry each, 1.5-2x slower), an idle one's
is closed by the cache, so descriptors beyond the active `.log` files stay bounded node-wide.

Index files carry no checksum: they are derived data. After an unclean shutdown the segments
past the recovery point have their indexes rebuilt from the log, which is the truth; a file
that fails `sanity_check` is rebuilt the same way. A file created by the first entry and lost
in a crash (its directory entry not yet fsynced) is an index that is missing: rebuilt too.

Lookups are binary searches that try the warm tail first. Appends land at the end and most
fetches read near the end, so searching the last 8192 bytes (the pages most recently touched)
before the rest keeps the common lookup off pages that may have been evicted.
"""

from __future__ import annotations

import abc
import os
import struct
import threading
from collections.abc import Callable, Sequence
from itertools import starmap
from pathlib import Path

from ..errors import CorruptIndexError, InvalidOffsetError, LogClosedError
from . import open_files as open_files_module
from .file_mapping import FileMapping
from .open_files import OpenFileCache

WARM_SECTION_BYTES = 8192
ZERO_CHUNK_BYTES = 1024 * 1024
# A reader that finds its mapping replaced (a resize, or a release by the OpenFileCache)
# tries the new one without the lock; after this many it reads under the index's lock, which
# a release never waits for and so cannot take the mapping away from (a cache closing idle
# files over and over would otherwise starve a reader).
_READ_ATTEMPTS = 3


class AbstractIndex(abc.ABC):
    ENTRY: struct.Struct  # set by subclasses
    KIND = "index"

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_bytes: int,
        *,
        writable: bool = True,
        open_files: OpenFileCache = open_files_module.SHARED,
    ):
        self.path = path
        self.base_offset = base_offset
        entry_bytes = self.ENTRY.size
        self.max_index_bytes = max_index_bytes - max_index_bytes % entry_bytes
        if self.max_index_bytes < entry_bytes:
            raise CorruptIndexError(f"index size {max_index_bytes} is below one entry")
        self.writable = writable
        # Guards the lazy load and every change of the mapping or the file's length.
        self._lock = threading.RLock()
        self._loaded = False
        self._closed = False
        self._entries = 0
        self._length = 0  # bytes of the file as mapped; 0 while the file does not exist
        self._mapping: FileMapping | None = None
        self._unflushed = False
        self._fd = -1  # the writing descriptor, while the OpenFileCache keeps it
        self._offer_again = False
        # Set while this index offers itself to the OpenFileCache: the cache may then close
        # other files, and a victim in this index's own segment releases this index —
        # reentrantly, on this thread, which holds the lock (an RLock) in the middle of a
        # load or a write. Release and park refuse while it is set.
        self._offering = False
        self._open_files = open_files

    # -- lazy load -----------------------------------------------------------------------

    @property
    def is_loaded(self) -> bool:
        return self._loaded

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            if self._closed:
                raise LogClosedError(f"{self.path} is closed")
            try:
                length = os.stat(self.path).st_size
            except FileNotFoundError:
                length = 0
            self._entries = length // self.ENTRY.size
            self._length = 0
            if length:
                wanted = max(length, self.max_index_bytes) if self.writable else length
                self._open_and(lambda fd: self._remap(fd, wanted))
            self._loaded = True

    def make_writable(self) -> None:
        """The segment takes appends from now on: preallocate when (or once) loaded."""
        with self._lock:
            self.writable = True
            if self._loaded and 0 < self._length < self.max_index_bytes:
                self.resize(self.max_index_bytes)

    def make_read_only(self) -> None:
        """The segment rolled: trim the file to its entries; no more appends."""
        with self._lock:
            self.trim_to_valid_size()
            self.writable = False

    def release(self) -> bool:
        """Unmap a trimmed index nobody writes to (an old segment gone idle); the next use
        loads it again. False when it cannot be released (writable or untrimmed: its file
        is preallocated, so the entry count would not survive a reload), or when the index
        is in use: releasing runs from the OpenFileCache, which must never wait on a lock
        (the holder may be waiting on the cache's victims in turn)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._offering or self.writable or self._length > self._entries * self.ENTRY.size:
                return False
            self._loaded = False  # first: a reader that sees it waits for the lock
            if self._mapping is not None:
                self._mapping.unmap()
                self._mapping = None
            return True
        finally:
            self._lock.release()

    def _open_and(self, action: Callable[[int], object], *, create: bool = False) -> None:
        """Run `action(fd)` on the writing descriptor, opened when the cache closed it."""
        with self._lock:  # every use of the descriptor holds the lock: `park` waits for it
            # Offered to the cache when opened (or when a park skipped it), not at every
            # write: the cache's order is by opening, and an index it closes while still
            # busy costs one open to come back. Per write, the cache's lock and reordering
            # were a tenth of an append's time.
            offer = self._fd < 0 or self._offer_again
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
            self._offer_again = False
            action(self._fd)
            if offer:
                # Under the lock (the cache never waits on it: park and release try it),
                # so the flag is seen by a reentrant release and by no one else.
                self._offering = True
                try:
                    self._open_files.used(self)
                finally:
                    self._offering = False

    def park(self) -> bool:
        """The OpenFileCache closes the writing descriptor of an index gone idle. An index
        in use (its lock held: maybe by a thread now waiting on another file's lock) is
        skipped, never waited for; its next use offers it to the cache again."""
        if not self._lock.acquire(blocking=False):
            self._offer_again = True  # out of the cache now: back in at its next use
            return False
        try:
            if self._offering:  # reentrant, from this index's own offer: keep it
                self._offer_again = True
                return False
            self._close_fd()
            return True
        finally:
            self._lock.release()

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _remap(self, fd: int, length: int) -> None:
        """Give the file `length` bytes and map them (the lock is held)."""
        if self._mapping is not None:
            self._mapping.unmap()  # before the file shrinks under it
            self._mapping = None
        if os.fstat(fd).st_size != length:
            os.ftruncate(fd, length)
        self._length = length
        self._mapping = FileMapping(fd, length) if length else None

    def _write_at(self, fd: int, data: bytes, position: int) -> None:
        written = os.pwrite(fd, data, position)
        if written != len(data):
            raise OSError(f"pwrite to {self.path} wrote {written} of {len(data)} bytes")

    # -- entries -------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        if not self._loaded:
            self._ensure_loaded()
        return self._entries

    @property
    def max_entries(self) -> int:
        if not self._loaded:
            self._ensure_loaded()
        if self._length:
            return self._length // self.ENTRY.size
        return self.max_index_bytes // self.ENTRY.size if self.writable else 0

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _current_mapping(self) -> FileMapping | None:
        """The mapping to read, loading the index if needed; None when the file is empty.
        A mapping being replaced (a resize, a release) is waited for under the lock."""
        self._ensure_loaded()
        mapping = self._mapping
        if mapping is not None:
            return mapping
        with self._lock:
            self._ensure_loaded()
            return self._mapping

    def _raw_entry(self, n: int) -> tuple[int, ...]:
        for _ in range(_READ_ATTEMPTS):
            mapping = self._current_mapping()
            if mapping is None:
                break
            entry = mapping.read_entry(self.ENTRY, n * self.ENTRY.size)
            if entry is not None:
                return entry
        with self._lock:  # no release while held: the mapping stays
            mapping = self._current_mapping()
            entry = None if mapping is None else mapping.read_entry(self.ENTRY, n * self.ENTRY.size)
        if entry is None:
            raise LogClosedError(f"{self.path} is closed or has no entry {n}")
        return entry

    @abc.abstractmethod
    def _key(self, n: int) -> int:
        """The value binary search compares: relative offset or timestamp."""

    def free_slots(self) -> int:
        """How many more entries the segment may append."""
        return self.max_entries - self._entries

    def _write_entry(self, *fields: int) -> None:
        self._write_entries([fields])

    def _write_entries(self, entries: Sequence[Sequence[int]]) -> None:
        self._write_packed(b"".join(starmap(self.ENTRY.pack, entries)))

    def _write_packed(self, data: bytes) -> None:
        """Append entries in the file's format (checked by the subclass) with one write;
        the first one creates and preallocates the file."""
        count = len(data) // self.ENTRY.size
        with self._lock:
            if count > self.max_entries - self._entries:
                # A programmer error (callers check free_slots), not corrupt data.
                raise AssertionError(
                    f"attempt to append {count} entries to a full index {self.path} "
                    f"({self._entries} of {self.max_entries} entries used)"
                )
            if self._closed:
                raise LogClosedError(f"{self.path} is closed")
            position = self._entries * self.ENTRY.size
            capacity = self.max_entries * self.ENTRY.size

            def write(fd: int) -> None:
                if self._length == 0:
                    self._remap(fd, capacity)
                self._write_at(fd, data, position)

            self._open_and(write, create=self._length == 0)
            self._entries += count
            self._unflushed = True

    def relative_offset(self, offset: int) -> int:
        """Base 50, offset 55 is stored as 5: the entry keeps 4 bytes for the offset."""
        relative = offset - self.base_offset
        if relative < 0 or relative > 0x7FFFFFFF:
            raise InvalidOffsetError(
                f"offset {offset} does not fit an index with base offset {self.base_offset}"
            )
        return relative

    # -- search --------------------------------------------------------------------------

    def _largest_lower_bound_slot(self, target: int) -> int:
        """The slot of the largest entry whose key <= target; -1 when there is none."""
        n = self.entries
        if n == 0 or self._key(0) > target:
            return -1
        warm_entries = WARM_SECTION_BYTES // self.ENTRY.size
        first_warm = max(0, n - warm_entries)
        if self._key(first_warm) <= target:
            return self._binary_search(target, first_warm, n - 1)
        return self._binary_search(target, 0, first_warm)

    def _binary_search(self, target: int, low: int, high: int) -> int:
        # invariant: key(low) <= target; answer in [low, high]
        while low < high:
            mid = (low + high + 1) >> 1
            if self._key(mid) <= target:
                low = mid
            else:
                high = mid - 1
        return low

    # -- lifecycle -----------------------------------------------------------------------

    def truncate_to_entries(self, entries: int) -> None:
        with self._lock:
            self._ensure_loaded()
            if self._length and entries < self._entries:
                start, end = entries * self.ENTRY.size, self._entries * self.ENTRY.size
                self._open_and(lambda fd: self._zero(fd, start, end))
                self._unflushed = True
            self._entries = entries

    def _zero(self, fd: int, start: int, end: int) -> None:
        """Zero bytes [start, end) where the file holds data, leaving its holes holes: a
        preallocated index reopened after a crash counts every slot as an entry, and zeroing
        it whole wrote max_index_bytes of real blocks per index at each recovery (10 MiB,
        twice per partition: a node with 53 partitions filled a 230 MiB disk)."""
        position = start
        while position < end:
            try:
                data = os.lseek(fd, position, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole from here to the end of the file
                return
            if data >= end:
                return
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
            for chunk in range(data, hole, ZERO_CHUNK_BYTES):
                self._write_at(fd, bytes(min(ZERO_CHUNK_BYTES, hole - chunk)), chunk)
            position = hole

    def resize(self, new_length: int) -> None:
        """Remap the file at `new_length` bytes (rounded down to whole entries); a file that
        does not exist yet and would stay empty is not created."""
        with self._lock:
            self._ensure_loaded()
            new_length -= new_length % self.ENTRY.size
            new_length = max(new_length, self._entries * self.ENTRY.size)
            if new_length == self._length:
                return
            self._open_and(lambda fd: self._remap(fd, new_length), create=True)
            self._unflushed = True

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail; an index never loaded was never preallocated."""
        if self._loaded:
            self.resize(self._entries * self.ENTRY.size)

    def flush(self) -> None:
        """fsync the file when something was written since the last flush (an index nobody
        changed costs no syscall)."""
        with self._lock:
            if self._unflushed and self._length and not self._closed:
                self._open_and(os.fsync)
            self._unflushed = False

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        with self._lock:
            self.truncate_to_entries(0)
            if self._length < self.max_index_bytes:
                self.resize(self.max_index_bytes)

    def close(self, *, create_if_missing: bool = True) -> None:
        """Trim, unmap, and leave the file on disk (with `create_if_missing`, an empty one
        for an index that was never written, as Kafka leaves every segment's three files)."""
        with self._lock:
            if self._closed:
                return
            if self._loaded:
                self.trim_to_valid_size()
            if not self._length and create_if_missing:
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644))
            if self._mapping is not None:
                self._mapping.unmap()
                self._mapping = None
            self._close_fd()
            self._closed = True
        self._open_files.forget(self)

    def rename_to(self, path: Path) -> None:
        with self._lock:
            try:
                os.replace(self.path, path)
            except FileNotFoundError:
                pass  # never created (lazy): the next use creates it under its new name
            self.path = path

    def delete(self) -> None:
        with self._lock:
            if self._mapping is not None:
                self._mapping.unmap()
                self._mapping = None
            self._close_fd()
            self._closed = True
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        self._open_files.forget(self)

    def _entries_bytes(self) -> bytes:
        for attempt in range(_READ_ATTEMPTS + 1):
            locked = attempt == _READ_ATTEMPTS
            if locked:
                self._lock.acquire()  # the last try: no release while held
            try:
                mapping = self._current_mapping()
                end = self._entries * self.ENTRY.size
                if end == 0:
                    return b""
                data = None if mapping is None else mapping.read_bytes(0, end)
            finally:
                if locked:
                    self._lock.release()
            if data is not None:
                return data
        raise LogClosedError(f"{self.path} is closed")

    def _check_untrimmed_tail(self) -> None:
        """A file left at its preallocated size by a crash ends in zero entries."""
        if self.entries and not any(self._raw_entry(self._entries - 1)):
            raise CorruptIndexError(
                f"{self.KIND} {self.path} ends in an all-zero entry: preallocated and never "
                f"trimmed ({self._entries} entry slots)"
            )
