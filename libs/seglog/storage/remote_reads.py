"""Reads of one copied segment in the object store (Kafka's RemoteLogReader's work for one
partition): whole batches from the batch holding an offset, as the local read answers them,
found from where the previous read of a consumer reading forward ended, the segment's start,
or its remote offset index (remote_indexes.py), and answered from the segment's 8 MiB chunks
(remote_chunks.py: ranged GETs, fetched ahead of a reader going forward); and ListOffsets'
timestamp search through its remote time index.

A read costs, with its chunks held, no GET: its answer is a view of one chunk (or, crossing
a chunk's end, the pieces joined); otherwise one GET per chunk it touches, 8 MiB each (at
least one whole batch is answered, as locally). Only the fixed header of
each batch is parsed (RecordBatch v2, DESIGN.md: baseOffset int64 at 0, batchLength int32 at
8, lastOffsetDelta int32 at 23, maxTimestamp int64 at 35); the timestamp search decodes the
one batch the target falls in, as the local search does."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import CorruptRecordError
from ..records.batch import HEADER_BYTES, LOG_OVERHEAD, RecordBatch
from .remote_chunks import ChunkedObject, RemoteChunks
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

    data: bytes | memoryview
    next_offset: int
    next_position: int = -1
    # read_committed reads: the transactions aborted in the range read, from the copied
    # `.txnindex` files; `aborted_complete` False: the local log's indexes may hold more.
    aborted: tuple[AbortedTxn, ...] = ()
    aborted_complete: bool = True


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
        self, store: RemoteStore, indexes: RemoteIndexCache, chunks: RemoteChunks | None = None
    ) -> None:
        self.store = store
        self.indexes = indexes
        self.chunks = chunks or RemoteChunks(store)

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

    def object_of(self, topic: str, segment: RemoteSegment) -> ChunkedObject:
        key = segment_object(self._key(topic, segment), SEGMENT_LOG)
        return ChunkedObject(key, segment.segment_id, segment.size_bytes)

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
        obj = self.object_of(topic, segment)
        position = self.chunks.position_of(segment.segment_id, offset)
        if position is None:  # not where an earlier read ended: the index says
            position = (
                0
                if offset <= segment.base_offset
                else self.segment_indexes(topic, segment).position_at_or_before(offset)
            )
        taken = 0
        last_offset = offset - 1
        used = 0
        first_at = -1
        # The chunk the headers are parsed from, kept across batches: one cache look-up per
        # chunk, not per batch.
        chunk_at, chunk = -1, b""
        while position < segment.size_bytes:
            at = position - chunk_at
            if chunk_at < 0 or at + HEADER_BYTES > len(chunk):
                index = position // self.chunks.chunk_bytes
                chunk_at, chunk = index * self.chunks.chunk_bytes, self.chunks.chunk(obj, index)
                at = position - chunk_at
            batch = _header(chunk, at, position)
            if batch is None:  # the header crosses into the next chunk
                batch = _header(self.chunks.read(obj, position, HEADER_BYTES), 0, position)
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
            taken += 1
            last_offset = batch.last_offset
            used += batch.size
            position += batch.size
        if not taken:
            return RemoteRead(b"", offset)
        end = position
        data = self.chunks.read(obj, first_at, end - first_at)
        if len(data) != end - first_at:
            raise CorruptRecordError(
                f"remote segment {segment.segment_id}: {len(data)} bytes at {first_at}, "
                f"expected {end - first_at}"
            )
        self.chunks.remember_position(segment.segment_id, last_offset + 1, end)
        self.chunks.done_with(obj, first_at)
        return RemoteRead(data, last_offset + 1, end)

    def fetch_ahead(
        self, topic: str, segment: RemoteSegment, position: int, chunks: int, most: int
    ) -> list[int]:
        """Of the `chunks` chunks of `segment` from the one holding `position`, at most
        `most` that the caller is to fetch ahead (`fill`) for a consumer reading forward:
        those neither held nor on their way, while there is room for them."""
        obj = self.object_of(topic, segment)
        first = position // self.chunks.chunk_bytes
        claimed: list[int] = []
        for index in range(first, first + chunks):
            if len(claimed) >= most:
                break
            if self.chunks.claim(obj, index):
                claimed.append(index)
        return claimed

    def fill(self, topic: str, segment: RemoteSegment, index: int) -> None:
        self.chunks.fill(self.object_of(topic, segment), index)

    def abandon(self, topic: str, segment: RemoteSegment, index: int) -> None:
        self.chunks.abandon(self.object_of(topic, segment), index)

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


def _header(window: bytes | memoryview, at: int, position: int) -> _Batch | None:
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
