"""The remote segments' indexes a reader keeps (Kafka's RemoteIndexCache): each copied
segment's `offset.index` and `time.index`, fetched whole on first use, held in memory in
an LRU bounded by their total bytes (`remote.log.index.file.cache.total.size.bytes`, Kafka's
default 1 GiB). A segment of 1 GiB with one index entry per 4 KiB holds 2 MiB of offset
index and 3 MiB of time index, so the default keeps about 200 segments' indexes; a miss
costs two GETs, a hit none.

The formats are the local ones (offset_index.py, time_index.py), trimmed to their entries:
    offset.index  8-byte entries: relative offset int32, file position int32 (big-endian)
    time.index    12-byte entries: timestamp int64, relative offset int32 (big-endian)
both sorted; an index copied untrimmed ends in zero entries, which lookups ignore (an entry
after the first whose relative offset is 0 is padding, as the local loader reads it)."""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .txn_index import TxnSearch, collect_aborted

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")

# Kafka's remote.log.index.file.cache.total.size.bytes default.
DEFAULT_INDEX_CACHE_BYTES = 1 << 30


@dataclass(frozen=True)
class RemoteIndexes:
    """One remote segment's indexes, as bytes (txn_index: its copied `.txnindex`, Kafka's
    34-byte AbortedTxn entries, txn_index.py; empty when none was aborted in it)."""

    base_offset: int
    offset_index: bytes
    time_index: bytes
    txn_index: bytes = b""

    @property
    def size(self) -> int:
        return len(self.offset_index) + len(self.time_index) + len(self.txn_index)

    def aborted_transactions(self, start: int, end: int) -> TxnSearch:
        """Entries overlapping [start, end), as the local index's `collect` answers."""
        return collect_aborted(self.txn_index, start, end)

    def position_at_or_before(self, offset: int) -> int:
        """The file position of the last indexed batch starting at or before `offset`
        (0: the segment's start)."""
        entries = _entries(self.offset_index, OFFSET_ENTRY.size)
        target = offset - self.base_offset
        lo, hi, found = 0, entries - 1, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            relative, position = OFFSET_ENTRY.unpack_from(self.offset_index, mid * 8)
            if relative <= target:
                found, lo = position, mid + 1
            else:
                hi = mid - 1
        return found

    @property
    def offset_entries(self) -> int:
        """How many entries the offset index holds."""
        return _entries(self.offset_index, OFFSET_ENTRY.size)

    def offset_entry(self, index: int) -> tuple[int, int]:
        """Entry `index` of the offset index: (the indexed batch's last offset, absolute; its
        file position), as the local index writes them (segment.py, Kafka's LogSegment)."""
        relative, position = OFFSET_ENTRY.unpack_from(self.offset_index, index * OFFSET_ENTRY.size)
        return self.base_offset + relative, position

    def offset_at_or_before_timestamp(self, timestamp_ms: int) -> int:
        """The offset of the last time index entry whose timestamp < `timestamp_ms` (the
        segment's base offset when none): no record before it reaches the target."""
        entries = _entries(self.time_index, TIME_ENTRY.size)
        lo, hi, found = 0, entries - 1, self.base_offset
        while lo <= hi:
            mid = (lo + hi) // 2
            timestamp, relative = TIME_ENTRY.unpack_from(self.time_index, mid * 12)
            if timestamp < timestamp_ms:
                found, lo = self.base_offset + relative, mid + 1
            else:
                hi = mid - 1
        return found


def _entries(index: bytes, entry_size: int) -> int:
    """How many real entries the index holds (trailing zero entries are padding)."""
    count = len(index) // entry_size
    while count > 1 and index[(count - 1) * entry_size : count * entry_size] == bytes(entry_size):
        count -= 1
    return count


class RemoteIndexCache:
    """Bytes-bounded LRU of remote segments' indexes, keyed by segment id. `load` fetches a
    missing segment's indexes (two GETs); concurrent misses of one segment may both load,
    and the last one stored wins (they are the same bytes)."""

    def __init__(self, total_size_bytes: int = DEFAULT_INDEX_CACHE_BYTES) -> None:
        self.total_size_bytes = total_size_bytes
        self._entries: OrderedDict[str, RemoteIndexes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, segment_id: str, load: Callable[[], RemoteIndexes]) -> RemoteIndexes:
        with self._lock:
            found = self._entries.get(segment_id)
            if found is not None:
                self._entries.move_to_end(segment_id)
                self.hits += 1
                return found
            self.misses += 1
        loaded = load()  # outside the lock: GETs of other segments go on meanwhile
        with self._lock:
            old = self._entries.pop(segment_id, None)
            if old is not None:
                self._bytes -= old.size
            if loaded.size <= self.total_size_bytes:
                self._entries[segment_id] = loaded
                self._bytes += loaded.size
                while self._bytes > self.total_size_bytes:
                    _, evicted = self._entries.popitem(last=False)
                    self._bytes -= evicted.size
        return loaded

    def remove(self, segment_id: str) -> None:
        """Forget a segment (remote retention deleted it)."""
        with self._lock:
            old = self._entries.pop(segment_id, None)
            if old is not None:
                self._bytes -= old.size

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes
