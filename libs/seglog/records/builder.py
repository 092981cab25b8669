"""RecordBatchBuilder: builds one v2 batch (layout in batch.py) from records, written into
its records section by a records writer (records_writer.py; C on the producer's hot path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from crc32c import crc32c

from ..errors import InvalidRecordError
from .batch import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
)
from .compression import CompressionType, check_codec, compress
from .records_writer import Headers, RecordsWriter, RecordsWriterType, encode_headers

__all__ = ["Headers", "RecordBatchBuilder", "build_batch", "encode_headers"]

# Largest overhead of one record beyond key, value and headers: length (5), attributes (1),
# timestampDelta (10), offsetDelta (5), key length (5), value length (5), header count (5).
MAX_RECORD_OVERHEAD = 36


class AppendRecord(Protocol):
    def __call__(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> int: ...


class AppendValue(Protocol):
    def __call__(self, value: bytes, timestamp_ms: int) -> int: ...


class AppendMany(Protocol):
    def __call__(
        self,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> int: ...


class RecordBatchBuilder:
    """Accumulates records into one RecordBatch v2.

    `max_bytes` bounds the batch's uncompressed size: `append` returns False when a record
    would push past it (the first record is always accepted, so that one record larger than
    the limit still gets a batch of its own, as Kafka's producer does).

    The records go to a records writer (records_writer.py: C, or the Python reference when
    `writer` says so); its append methods are this builder's own, bound once here, so that a
    record costs one call into C and no Python frame.
    """

    __slots__ = (
        "_writer",
        "append",
        "append_value",
        "append_many",
        "_codec",
        "_attributes",
        "_producer_id",
        "_producer_epoch",
        "_base_sequence",
        "_partition_leader_epoch",
        "_base_offset",
    )

    append: AppendRecord
    """`append(key, value, timestamp_ms=None, headers=None)`: add one record; returns the
    record count, or 0 (and nothing added) when the record does not fit in `max_bytes`."""
    append_value: AppendValue
    """`append(None, value, timestamp_ms)`: the producer's common record."""
    append_many: AppendMany
    """`append_many(values, keys=None, timestamp_ms=None)`: records sharing one timestamp and
    no headers; returns how many fitted, stopping at the first that does not."""

    def __init__(
        self,
        *,
        compression: CompressionType | int = CompressionType.NONE,
        max_bytes: int = 1 << 30,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        writer: Callable[[int], RecordsWriterType] = RecordsWriter,
    ) -> None:
        self._codec = check_codec(int(compression))
        if max_bytes < HEADER_BYTES:
            raise InvalidRecordError(
                f"max_bytes {max_bytes} is below the {HEADER_BYTES}-byte batch header"
            )
        if is_transactional and producer_id == NO_PRODUCER_ID:
            raise InvalidRecordError("a transactional batch needs a producer id")
        self._writer = records = writer(max_bytes - HEADER_BYTES)
        self.append = records.append
        self.append_value = records.append_value
        self.append_many = records.append_many
        self._attributes = self._codec | (TRANSACTIONAL_MASK if is_transactional else 0)
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._base_offset = base_offset

    @property
    def record_count(self) -> int:
        return self._writer.record_count

    @property
    def size_in_bytes(self) -> int:
        """Uncompressed size so far, header included."""
        return HEADER_BYTES + self._writer.records_bytes

    def has_room_for(self, key: bytes | None, value: bytes | None) -> bool:
        records = self._writer
        if records.record_count == 0:
            return True
        extra = MAX_RECORD_OVERHEAD + len(key or b"") + len(value or b"")
        return records.records_bytes + extra <= records.max_records_bytes

    def build(self) -> bytes:
        """Finish the batch: compress the records section, fill in the header and CRC."""
        records = self._records()
        out = bytearray(HEADER_BYTES)
        out += records
        self._fill_header(out, len(out))
        return bytes(out)

    def build_into(self, buffer: bytearray) -> memoryview | bytes:
        """As `build`, written into `buffer` (a producer's pooled buffer) when it fits;
        a batch that compressed larger than the buffer comes back as new bytes instead."""
        records = self._records()
        size = HEADER_BYTES + len(records)
        if size > len(buffer):
            out = bytearray(HEADER_BYTES)
            out += records
            self._fill_header(out, size)
            return bytes(out)
        buffer[HEADER_BYTES:size] = records
        self._fill_header(buffer, size)
        return memoryview(buffer)[:size]

    def _records(self) -> bytes:
        if self._writer.record_count == 0:
            raise InvalidRecordError("cannot build a batch with no records")
        records = self._writer.section()
        return records if self._codec == CompressionType.NONE else compress(self._codec, records)

    def _fill_header(self, out: bytearray, size: int) -> None:
        records = self._writer
        count = records.record_count
        HEADER.pack_into(
            out,
            0,
            self._base_offset,
            size - LOG_OVERHEAD,
            self._partition_leader_epoch,
            MAGIC_V2,
            0,  # crc, filled below
            self._attributes,
            count - 1,
            records.base_timestamp,
            records.max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            count,
        )
        crc = crc32c(memoryview(out)[ATTRIBUTES_OFFSET:size])
        out[ATTRIBUTES_OFFSET - 4 : ATTRIBUTES_OFFSET] = crc.to_bytes(4, "big")


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None]],
    *,
    timestamp_ms: int | None = None,
    compression: CompressionType | int = CompressionType.NONE,
    base_offset: int = 0,
) -> bytes:
    """One batch of (key, value) pairs sharing a timestamp; a convenience for tests and tools."""
    builder = RecordBatchBuilder(compression=compression, base_offset=base_offset)
    for key, value in records:
        builder.append(key, value, timestamp_ms)
    return builder.build()
