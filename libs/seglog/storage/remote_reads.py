"""Reads of one copied segment in the object store (Kafka's RemoteLogReader's work for one
partition): whole batches from the batch holding an offset, as the local read answers them,
found with the segment's remote offset index (remote_indexes.py) and fetched by ranged GETs;
and ListOffsets' timestamp search through its remote time index.

A read costs, with the indexes cached, one GET of at most `max_bytes` plus the distance from
the indexed position to the wanted batch (one index interval, 4 KiB by default; more when
batches are larger); a batch larger than what the first GET brought takes a second GET for
the rest of it (at least one whole batch is answered, as locally). Only the fixed header of
each batch is parsed (RecordBatch v2, DESIGN.md: baseOffset int64 at 0, batchLength int32 at
8, lastOffsetDelta int32 at 23, maxTimestamp int64 at 35); the timestamp search decodes the
one batch the target falls in, as the local search does."""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import CorruptRecordError
from ..records.batch import HEADER_BYTES, LOG_OVERHEAD, RecordBatch
from .remote_indexes import RemoteIndexCache, RemoteIndexes
from .remote_layout import (
    OFFSET_INDEX,
    SEGMENT_LOG,
    TIME_INDEX,
    TXN_INDEX,
    SegmentKey,
    segment_object,
)
from .remote_metadata import RemoteSegment
from .remote_store import RemoteObjectNotFoundError, RemoteStore
from .txn_index import AbortedTxn

_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA = struct.Struct(">i")  # at 23
_MAX_TIMESTAMP = struct.Struct(">q")  # at 35
# Read past the wanted batch's indexed position by this much beyond max_bytes: the index has
# an entry every index.interval.bytes (4096 by default), so the batch holding the offset
# starts within about that of the entry.
SLACK_BYTES = 8 * 1024
# What a GET asks for at least: a few small batches in one round trip.
MIN_GET_BYTES = 64 * 1024


@dataclass(frozen=True)
class RemoteRead:
    """Whole batches read from a remote segment (b"": none at or past the offset below the
    bound), where the next read continues, and that batch's file position (-1: unknown)."""

    data: bytes
    next_offset: int
    next_position: int = -1
    # read_committed reads: the transactions aborted in the range read, from the copied
    # `.txnindex` files; `aborted_complete` False: the local log's indexes may hold more.
    aborted: tuple[AbortedTxn, ...] = ()
    aborted_complete: bool = True


# What read-ahead may hold at once: a few consumers' next fetch each (1 MiB by default).
READ_AHEAD_BYTES = 64 * 1024 * 1024


class ReadAhead:
    """Bytes fetched ahead of a consumer reading forward (Kafka has no such thing; its
    RemoteStorageManager plugins cache chunks): keyed by (segment id, the offset of the batch
    they start with), taken by the read that asks for that offset, least recently stored out
    first past READ_AHEAD_BYTES. A read that arrives while the bytes it wants are still on
    their way waits for them (at most `wait_s`) instead of asking the store a second time."""

    def __init__(self, total_bytes: int = READ_AHEAD_BYTES, *, wait_s: float = 5.0) -> None:
        self.total_bytes = total_bytes
        self.wait_s = wait_s
        self._held: OrderedDict[tuple[str, int], tuple[int, bytes]] = OrderedDict()
        self._coming: dict[tuple[str, int], threading.Event] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    def begin(self, segment_id: str, offset: int) -> None:
        """These bytes are being fetched: a read asking for them waits for `put`/`abandon`."""
        with self._lock:
            self._coming.setdefault((segment_id, offset), threading.Event())

    def abandon(self, segment_id: str, offset: int) -> None:
        with self._lock:
            coming = self._coming.pop((segment_id, offset), None)
        if coming is not None:
            coming.set()

    def put(self, segment_id: str, offset: int, position: int, data: bytes) -> None:
        with self._lock:
            old = self._held.pop((segment_id, offset), None)
            self._bytes -= len(old[1]) if old else 0
            if len(data) <= self.total_bytes:
                self._held[(segment_id, offset)] = (position, data)
                self._bytes += len(data)
                while self._bytes > self.total_bytes:
                    _, (_, evicted) = self._held.popitem(last=False)
                    self._bytes -= len(evicted)
            coming = self._coming.pop((segment_id, offset), None)
        if coming is not None:
            coming.set()

    def take(self, segment_id: str, offset: int) -> tuple[int, bytes] | None:
        key = (segment_id, offset)
        with self._lock:
            coming = self._coming.get(key) if key not in self._held else None
        if coming is not None:
            coming.wait(self.wait_s)
        with self._lock:
            found = self._held.pop(key, None)
            if found is not None:
                self._bytes -= len(found[1])
                self.hits += 1
            return found


@dataclass(frozen=True)
class _Batch:
    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp_ms: int


class RemoteLogReader:
    """Reads copied segments through `store`, their indexes through `indexes`."""

    def __init__(
        self, store: RemoteStore, indexes: RemoteIndexCache, ahead: ReadAhead | None = None
    ) -> None:
        self.store = store
        self.indexes = indexes
        self.ahead = ahead or ReadAhead()

    def _key(self, topic: str, segment: RemoteSegment) -> SegmentKey:
        return SegmentKey(
            topic, segment.topic_id, segment.partition, segment.base_offset, segment.segment_id
        )

    def segment_indexes(self, topic: str, segment: RemoteSegment) -> RemoteIndexes:
        key = self._key(topic, segment)

        def load() -> RemoteIndexes:
            try:
                txn_index = self.store.get(segment_object(key, TXN_INDEX))
            except RemoteObjectNotFoundError:  # copied before transactions' indexes were
                txn_index = b""
            return RemoteIndexes(
                segment.base_offset,
                self.store.get(segment_object(key, OFFSET_INDEX)),
                self.store.get(segment_object(key, TIME_INDEX)),
                txn_index,
            )

        return self.indexes.get(segment.segment_id, load)

    def read(
        self,
        topic: str,
        segment: RemoteSegment,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> RemoteRead:
        """Whole batches of `segment` from the one holding `offset`, up to `max_bytes` (at
        least one when `min_one_message`), none starting at or past `max_offset`."""
        key = segment_object(self._key(topic, segment), SEGMENT_LOG)
        ahead = self.ahead.take(segment.segment_id, offset)
        if ahead is not None:  # fetched while the consumer handled its previous answer
            start, window = ahead
        else:
            start = self.segment_indexes(topic, segment).position_at_or_before(offset)
            window = self._get(key, start, max(max_bytes + SLACK_BYTES, MIN_GET_BYTES), segment)
        window_at = start
        taken: list[_Batch] = []
        used = 0
        first_at = -1
        position = start
        while position < segment.size_bytes:
            batch = _header(window, position - window_at, position)
            if batch is None:  # the header runs past the window: read on from it
                if taken and used >= max_bytes:
                    break
                window_at = position
                window = self._get(
                    key, position, max(max_bytes + SLACK_BYTES, MIN_GET_BYTES), segment
                )
                batch = _header(window, 0, position)
                if batch is None:
                    break  # the object ends inside a header: only what came before counts
            if batch.last_offset < offset:
                position += batch.size
                continue
            if max_offset is not None and batch.base_offset >= max_offset:
                break
            if (taken or not min_one_message) and used + batch.size > max_bytes:
                break
            if not taken:
                first_at = position
            taken.append(batch)
            used += batch.size
            position += batch.size
        if not taken:
            return RemoteRead(b"", offset)
        end = position
        if first_at >= window_at and end <= window_at + len(window):
            data = window[first_at - window_at : end - window_at]
        else:
            data = self.store.get_range(key, first_at, end - first_at)
        if len(data) != end - first_at:
            raise CorruptRecordError(
                f"remote segment {segment.segment_id}: {len(data)} bytes at {first_at}, "
                f"expected {end - first_at}"
            )
        return RemoteRead(data, taken[-1].last_offset + 1, end)

    def read_ahead(
        self, topic: str, segment: RemoteSegment, offset: int, position: int, length: int
    ) -> None:
        """Fetch `length` bytes from `position` (where the batch starting at `offset` lies)
        for the read that will ask for `offset` next."""
        if position < 0 or position >= segment.size_bytes:
            self.ahead.abandon(segment.segment_id, offset)
            return
        key = segment_object(self._key(topic, segment), SEGMENT_LOG)
        self.ahead.begin(segment.segment_id, offset)
        try:
            data = self._get(key, position, length, segment)
        except BaseException:
            self.ahead.abandon(segment.segment_id, offset)
            raise
        self.ahead.put(segment.segment_id, offset, position, data)

    def offset_for_timestamp(
        self, topic: str, segment: RemoteSegment, timestamp_ms: int, start_offset: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record of `segment` at or after `start_offset`
        whose timestamp >= `timestamp_ms`, as the local search (segment_reads)."""
        indexes = self.segment_indexes(topic, segment)
        begin = max(indexes.offset_at_or_before_timestamp(timestamp_ms), start_offset)
        position = indexes.position_at_or_before(begin)
        key = segment_object(self._key(topic, segment), SEGMENT_LOG)
        window_at, window = position, b""
        while position < segment.size_bytes:
            batch = _header(window, position - window_at, position)
            if batch is None:
                window_at = position
                window = self._get(key, position, MIN_GET_BYTES, segment)
                batch = _header(window, 0, position)
                if batch is None:
                    return None
            if batch.max_timestamp_ms >= timestamp_ms and batch.last_offset >= start_offset:
                if position + batch.size <= window_at + len(window):
                    raw = window[position - window_at : position - window_at + batch.size]
                else:
                    raw = self.store.get_range(key, position, batch.size)
                for record in RecordBatch(raw).records():
                    if record.timestamp_ms >= timestamp_ms and record.offset >= start_offset:
                        return record.offset, record.timestamp_ms
            position += batch.size
        return None

    def _get(self, key: str, position: int, length: int, segment: RemoteSegment) -> bytes:
        return self.store.get_range(key, position, min(length, segment.size_bytes - position))


def _header(window: bytes, at: int, position: int) -> _Batch | None:
    """The batch header at `at` in `window` (file position `position`), None when the window
    ends before the header does."""
    if at < 0 or at + HEADER_BYTES > len(window):
        return None
    base, length = _HEAD.unpack_from(window, at)
    if length < HEADER_BYTES - LOG_OVERHEAD:
        raise CorruptRecordError(f"remote batch at {position}: batch length {length}")
    (delta,) = _LAST_DELTA.unpack_from(window, at + 23)
    (max_ts,) = _MAX_TIMESTAMP.unpack_from(window, at + 35)
    return _Batch(position, base, base + delta, length + LOG_OVERHEAD, max_ts)
