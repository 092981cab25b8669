"""Copied segments' bytes in memory, in fixed chunks of the segment object (Kafka has no such
thing; its RemoteStorageManager plugins keep chunk caches of this shape): what remote reads
answer from, and what a consumer reading forward has fetched ahead of it.

Why chunks: a cold read is bound by the store's time to first byte (SeaweedFS: ~10 ms a GET
on a loaded 2-core machine), not by its bandwidth. GETs of CHUNK_BYTES (8 MiB) aligned at
multiples of it, several in flight per partition ahead of the consumer, turn a 1 MiB
round trip per fetch chunk into reads from memory. Aligned chunks make every byte range's
GETs known without state: position p lies in chunk p // CHUNK_BYTES, each fetched once (a
read finding its chunk on its way waits for it instead of asking the store again).

Bounded: chunks held are at most `total_bytes` (least recently used out first, chunks a read
has gone past before chunks not read yet), and fetches ahead are claimed only while the
chunks not read yet plus those on their way fit in it, so read-ahead never evicts itself.

Where a consumer's next read starts: each read leaves (segment, next offset) -> file
position, so the next read needs no offset index (and its GETs) to find its first batch.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from .remote_store import RemoteStore

CHUNK_BYTES = 8 * 1024 * 1024
# What the chunks may hold at once: a few partitions' consumers each reading a few chunks
# ahead (the bench's 4 partitions, each a chunk read and 2 ahead, hold 96 MiB).
DEFAULT_CHUNK_CACHE_BYTES = 128 * 1024 * 1024
# Where consumers' next reads start, remembered for this many (segment, offset) pairs.
_POSITIONS = 4096


@dataclass(frozen=True)
class ChunkedObject:
    """One segment object: its store key, its cache identity and its size."""

    key: str
    segment_id: str
    size_bytes: int


@dataclass
class _Held:
    data: bytes
    read: bool = False  # a read has used it: it goes before chunks fetched ahead


class RemoteChunks:
    """Aligned chunks of segment objects fetched from `store`, shared by a node's readers."""

    def __init__(
        self,
        store: RemoteStore,
        total_bytes: int = DEFAULT_CHUNK_CACHE_BYTES,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        wait_s: float = 15.0,
    ) -> None:
        self.store = store
        self.total_bytes = total_bytes
        self.chunk_bytes = chunk_bytes
        self.wait_s = wait_s  # longer than the store client's read timeout
        self._held: OrderedDict[tuple[str, int], _Held] = OrderedDict()
        self._coming: dict[tuple[str, int], threading.Event] = {}
        self._bytes = 0
        self._unread_bytes = 0
        self._positions: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._lock = threading.Lock()
        self.gets = 0  # chunks fetched from the store
        self.hits = 0  # chunks a read found held or on their way

    def chunk_count(self, obj: ChunkedObject) -> int:
        return -(-obj.size_bytes // self.chunk_bytes)

    # -- reads --------------------------------------------------------------------------

    def read(self, obj: ChunkedObject, position: int, length: int) -> bytes | memoryview:
        """`length` bytes from `position` (fewer at the object's end): a view of one chunk
        when they lie in one, else the chunks' pieces joined."""
        end = min(position + length, obj.size_bytes)
        if end <= position:
            return b""
        first, last = position // self.chunk_bytes, (end - 1) // self.chunk_bytes
        if first == last:
            at = first * self.chunk_bytes
            return memoryview(self.chunk(obj, first))[position - at : end - at]
        parts = []
        for index in range(first, last + 1):
            at = index * self.chunk_bytes
            data = self.chunk(obj, index)
            parts.append(memoryview(data)[max(position - at, 0) : min(end - at, len(data))])
        return b"".join(parts)

    def chunk(self, obj: ChunkedObject, index: int) -> bytes:
        """Chunk `index` of the object: held, waited for when on its way, else fetched now."""
        key = (obj.segment_id, index)
        with self._lock:
            held = self._take(key)
            coming = self._coming.get(key) if held is None else None
            if held is None and coming is None:  # others asking meanwhile wait for this GET
                self._coming[key] = threading.Event()
        if held is not None:
            return held
        if coming is not None:
            coming.wait(self.wait_s)
            with self._lock:
                held = self._take(key)
            if held is not None:
                return held
        try:
            data = self._get(obj, index)
        except BaseException:
            self.abandon(obj, index)
            raise
        self._put(key, data, read=True)
        return data

    def _take(self, key: tuple[str, int]) -> bytes | None:
        held = self._held.get(key)
        if held is None:
            return None
        self.hits += 1
        if not held.read:
            held.read = True
            self._unread_bytes -= len(held.data)
        self._held.move_to_end(key)
        return held.data

    def done_with(self, obj: ChunkedObject, before: int) -> None:
        """A read went past `before`: the chunks wholly before it go first when room is
        needed (a consumer reads forward; another reading the same bytes is rarer)."""
        with self._lock:
            for index in range(before // self.chunk_bytes - 1, -1, -1):
                key = (obj.segment_id, index)
                if key not in self._held:
                    break
                self._held.move_to_end(key, last=False)

    # -- fetching ahead -----------------------------------------------------------------

    def claim(self, obj: ChunkedObject, index: int) -> bool:
        """Whether the caller is to fetch chunk `index` ahead (then `fill` or `abandon` it):
        not held, not on its way, inside the object, and room for it among chunks unread."""
        key = (obj.segment_id, index)
        if index < 0 or index >= self.chunk_count(obj):
            return False
        with self._lock:
            if key in self._held or key in self._coming:
                return False
            coming_bytes = len(self._coming) * self.chunk_bytes
            if self._unread_bytes + coming_bytes + self.chunk_bytes > self.total_bytes:
                return False
            self._coming[key] = threading.Event()
        return True

    def fill(self, obj: ChunkedObject, index: int) -> None:
        """Fetch a claimed chunk; it is released (abandoned) when the store fails."""
        try:
            data = self._get(obj, index)
        except BaseException:
            self.abandon(obj, index)
            raise
        self._put((obj.segment_id, index), data, read=False)

    def abandon(self, obj: ChunkedObject, index: int) -> None:
        with self._lock:
            coming = self._coming.pop((obj.segment_id, index), None)
        if coming is not None:
            coming.set()

    # -- consumers' next positions --------------------------------------------------------

    def remember_position(self, segment_id: str, offset: int, position: int) -> None:
        with self._lock:
            self._positions[(segment_id, offset)] = position
            self._positions.move_to_end((segment_id, offset))
            while len(self._positions) > _POSITIONS:
                self._positions.popitem(last=False)

    def position_of(self, segment_id: str, offset: int) -> int | None:
        with self._lock:
            return self._positions.get((segment_id, offset))

    def forget(self, segment_id: str) -> None:
        """A segment gone from the store (remote retention): its chunks and positions."""
        with self._lock:
            for key in [k for k in self._held if k[0] == segment_id]:
                self._drop(key)
            for key in [k for k in self._positions if k[0] == segment_id]:
                del self._positions[key]

    # -- inside -------------------------------------------------------------------------

    def _get(self, obj: ChunkedObject, index: int) -> bytes:
        at = index * self.chunk_bytes
        self.gets += 1
        return self.store.get_range(obj.key, at, min(self.chunk_bytes, obj.size_bytes - at))

    def _put(self, key: tuple[str, int], data: bytes, *, read: bool) -> None:
        with self._lock:
            if key in self._held:
                self._drop(key)
            if len(data) <= self.total_bytes:
                self._held[key] = _Held(data, read)
                self._bytes += len(data)
                self._unread_bytes += 0 if read else len(data)
                self._evict()
            coming = self._coming.pop(key, None)
        if coming is not None:
            coming.set()

    def _evict(self) -> None:
        """Past total_bytes: chunks read before chunks not read yet, least recent first."""
        while self._bytes > self.total_bytes:
            victim = next((k for k, h in self._held.items() if h.read), None)
            self._drop(victim if victim is not None else next(iter(self._held)))

    def _drop(self, key: tuple[str, int]) -> None:
        held = self._held.pop(key)
        self._bytes -= len(held.data)
        if not held.read:
            self._unread_bytes -= len(held.data)
