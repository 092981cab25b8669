"""One batch of the producer's: filled by `send` through its builder, closed (encoded into
its pooled buffer) for sending, and completed when its answer comes back, which resolves the
futures of all its records at once and runs their callbacks on the sender thread."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator
from typing import Any

from crc32c import crc32c

from ..records import RecordBatchBuilder
from ..records.builder import Headers
from ..records.records_writer import C_WRITER, RecordsWriter
from .futures import BatchResult, Callback, RecordFuture

# RecordBatch v2 header: crc at 17 (over bytes 21..end), producerId/Epoch/baseSequence at 43.
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_PRODUCER_OFFSET = 43
_CRC = struct.Struct(">I")
_PRODUCER_FIELDS = struct.Struct(">qhi")
_ATTRIBUTES = struct.Struct(">h")
_TRANSACTIONAL_MASK = 0x10  # attributes bit 4 (records/batch.py)

logger = logging.getLogger(__name__)


class ProducerBatch:
    __slots__ = (
        "topic",
        "partition",
        "builder",
        "buffer",
        "result",
        "created_s",
        "attempts",
        "retry_at_s",
        "callbacks",
        "data",
        "record_count",
        "base_sequence",
        "fast_entry",
        "last_error",
    )

    def __init__(self, topic: str, partition: int, builder: RecordBatchBuilder, buffer: bytearray):
        self.topic = topic
        self.partition = partition
        self.builder: RecordBatchBuilder | None = builder
        self.buffer = buffer
        self.result = BatchResult()
        self.created_s = time.monotonic()
        self.attempts = 0
        self.retry_at_s = 0.0
        # (index in the batch, timestamp, callback) of each record sent with a callback, three
        # items in a row rather than its future: a future stays alive as long as its batch,
        # and so survives the collector's young generations into the old one. Three
        # collector-tracked objects per record in flight (future, pair, callback) made full
        # collections of the sending process come every half second at 40,000 records/s,
        # each 40-90 ms here; the index and timestamp are ints, which it does not track.
        self.callbacks: list[object] = []
        # The encoded batch, set when the batch is closed for sending.
        self.data: memoryview | bytes | None = None
        self.record_count = 0
        self.base_sequence: int | None = None  # set when an idempotent producer first sends it
        # The reason its last attempt failed: what it fails with when delivery_timeout_ms
        # ends its retries, when that reason is the node's word (NOT_ENOUGH_REPLICAS).
        self.last_error: BaseException | None = None
        # What `send`'s C path appends through (records/_encode.c): None when the builder's
        # writer is the Python one.
        writer = builder._writer
        self.fast_entry: tuple[object, ...] | None = (
            (writer, self.result, topic, partition, self.callbacks)
            if C_WRITER and type(writer) is RecordsWriter
            else None
        )

    @property
    def is_open(self) -> bool:
        return self.builder is not None

    def try_append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers | None,
        callback: Callback | None,
    ) -> RecordFuture | None:
        builder = self.builder
        count = 0 if builder is None else builder.append(key, value, timestamp_ms, headers)
        if not count:
            return None
        future = RecordFuture.of(self.result, self.topic, self.partition, count - 1, timestamp_ms)
        if callback is not None:
            self.callbacks += (count - 1, timestamp_ms, callback)
        return future

    def is_full(self) -> bool:
        builder = self.builder
        return builder is None or builder.size_in_bytes >= len(self.buffer)

    def close(self) -> None:
        """Encode the batch into its buffer; no more appends."""
        builder = self.builder
        if builder is None:
            return
        # Counted after the build: the C path may add records until the build seals them.
        self.data = builder.build_into(self.buffer)
        self.record_count = builder.record_count
        self.builder = None

    def stamp_producer(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        *,
        transactional: bool = False,
    ) -> None:
        """Write the idempotent producer's id, epoch and this batch's first sequence into the
        closed batch (header bytes 43-56, inside the CRC, which is computed again): sequences
        are given in the order batches are first sent, so a batch that never goes out leaves
        no gap. Retries send the same bytes. A transactional producer's batches get the
        transactional attribute bit too."""
        data = self.data
        if data is None or isinstance(data, bytes):
            raise RuntimeError(f"batch {self.topic}-{self.partition} is not closed into a buffer")
        _PRODUCER_FIELDS.pack_into(
            data, _PRODUCER_OFFSET, producer_id, producer_epoch, base_sequence
        )
        if transactional:
            (attributes,) = _ATTRIBUTES.unpack_from(data, _ATTRIBUTES_OFFSET)
            _ATTRIBUTES.pack_into(data, _ATTRIBUTES_OFFSET, attributes | _TRANSACTIONAL_MASK)
        _CRC.pack_into(data, _CRC_OFFSET, crc32c(data[_ATTRIBUTES_OFFSET:]))
        self.base_sequence = base_sequence

    @property
    def encoded(self) -> memoryview | bytes:
        """The batch's bytes, once closed."""
        if self.data is None:
            raise RuntimeError(f"batch {self.topic}-{self.partition} read before it was closed")
        return self.data

    @property
    def size_in_bytes(self) -> int:
        if self.data is not None:
            return len(self.data)
        assert self.builder is not None
        return self.builder.size_in_bytes

    def complete(
        self, base_offset: int, log_append_time_ms: int, error: BaseException | None
    ) -> None:
        """Resolve every record's future and run the callbacks, in the order sent."""
        result = self.result
        result.set(base_offset, log_append_time_ms, error)
        topic, partition = self.topic, self.partition
        triples: Iterator[Any] = iter(self.callbacks)
        for index, timestamp_ms, callback in zip(triples, triples, triples, strict=True):
            metadata = (
                None
                if error is not None
                else result.metadata(topic, partition, index, timestamp_ms)
            )
            try:
                callback(metadata, error)
            except Exception:  # a user callback must not stop the sender
                logger.exception("a producer callback raised")
        # In place: a stale entry of the C path's may hold the list until its partition
        # opens another batch.
        self.callbacks.clear()
