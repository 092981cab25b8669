"""RecordBatchBuilder: builds one v2 batch (layout in batch.py) from records.

The per-record work is the client's hot path, so `append` does no per-field function calls:
each varint of an ordinary record (small deltas and lengths) is one index into a table of
precomputed encodings, and each record is appended to one bytearray in a few extends.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

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
from .varint import VARINT_TABLE, VARINT_TABLE_OFFSET, encode_varint

Headers = Sequence[tuple[str, bytes | None]]

_TABLE_LOW = -VARINT_TABLE_OFFSET
_TABLE_HIGH = len(VARINT_TABLE) - VARINT_TABLE_OFFSET
_NULL = encode_varint(-1)
_NO_HEADERS = encode_varint(0)
_RECORD_ATTRIBUTES = b"\x00"
# Two fields that always sit side by side, looked up as one part: attributes (always 0) with
# the timestamp delta, and a null key's length with the value's length.
_ATTRIBUTES_AND_TS_DELTA = [_RECORD_ATTRIBUTES + v for v in VARINT_TABLE]
_NULL_KEY_AND_LENGTH = [_NULL + VARINT_TABLE[n + VARINT_TABLE_OFFSET] for n in range(_TABLE_HIGH)]
# Largest overhead of one record beyond key, value and headers: length (5), attributes (1),
# timestampDelta (10), offsetDelta (5), key length (5), value length (5), header count (5).
MAX_RECORD_OVERHEAD = 36


def encode_headers(headers: Headers) -> bytes:
    out = bytearray(encode_varint(len(headers)))
    for key, value in headers:
        if not isinstance(key, str):
            raise InvalidRecordError(f"header key must be str, got {type(key).__name__}")
        raw_key = key.encode("utf-8")
        out += encode_varint(len(raw_key))
        out += raw_key
        if value is None:
            out += _NULL
        else:
            out += encode_varint(len(value))
            out += value
    return bytes(out)


class RecordBatchBuilder:
    """Accumulates records into one RecordBatch v2.

    `max_bytes` bounds the batch's uncompressed size: `append` returns False when a record
    would push past it (the first record is always accepted, so that one record larger than
    the limit still gets a batch of its own, as Kafka's producer does).
    """

    __slots__ = (
        "_parts",
        "_records_bytes",
        "_codec",
        "_max_records_bytes",
        "_attributes",
        "_producer_id",
        "_producer_epoch",
        "_base_sequence",
        "_partition_leader_epoch",
        "_base_offset",
        "_base_timestamp",
        "_max_timestamp",
        "_count",
    )

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
    ) -> None:
        self._codec = check_codec(int(compression))
        if max_bytes < HEADER_BYTES:
            raise InvalidRecordError(
                f"max_bytes {max_bytes} is below the {HEADER_BYTES}-byte batch header"
            )
        if is_transactional and producer_id == NO_PRODUCER_ID:
            raise InvalidRecordError("a transactional batch needs a producer id")
        self._max_records_bytes = max_bytes - HEADER_BYTES
        self._attributes = self._codec | (TRANSACTIONAL_MASK if is_transactional else 0)
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._base_offset = base_offset
        # Records are kept as a list of byte strings joined once by build(): one list
        # extend per record is the cheapest append CPython offers (measured ~2x a bytearray).
        self._parts: list[bytes] = []
        self._records_bytes = 0
        self._base_timestamp = 0
        self._max_timestamp = 0
        self._count = 0

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Uncompressed size so far, header included."""
        return HEADER_BYTES + self._records_bytes

    def has_room_for(self, key: bytes | None, value: bytes | None) -> bool:
        if self._count == 0:
            return True
        extra = MAX_RECORD_OVERHEAD + len(key or b"") + len(value or b"")
        return self._records_bytes + extra <= self._max_records_bytes

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> int:
        """Add one record; returns the record count, or 0 (and nothing added) when the record
        does not fit in `max_bytes` — so its truth is whether the record was added."""
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        if key is None and not headers and value is not None:
            return self.append_value(value, timestamp_ms)
        return self._append_record(key, value, timestamp_ms, headers)

    def append_value(self, value: bytes, timestamp_ms: int) -> int:
        """`append(None, value, timestamp_ms)`: the common record, with no key and no headers,
        on a path of its own (the producer's per-record hot path). Every varint of an ordinary
        record comes from a table, with attributes and the null key folded into their
        neighbours' parts; anything outside the tables takes `append`'s general path."""
        count = self._count
        ts_delta = timestamp_ms - self._base_timestamp if count else 0
        n = len(value)
        if not (_TABLE_LOW <= ts_delta < _TABLE_HIGH and n < _TABLE_HIGH and count < _TABLE_HIGH):
            return self._append_record(None, value, timestamp_ms, None)
        offset = VARINT_TABLE_OFFSET
        head = _ATTRIBUTES_AND_TS_DELTA[ts_delta + offset]
        offset_part = VARINT_TABLE[count + offset]
        value_part = _NULL_KEY_AND_LENGTH[n]
        # + 1: the header count, always the one byte of _NO_HEADERS here.
        size = len(head) + len(offset_part) + len(value_part) + n + 1
        if size >= _TABLE_HIGH:
            return self._append_record(None, value, timestamp_ms, None)
        length_part = VARINT_TABLE[size + offset]
        records_bytes = self._records_bytes + len(length_part) + size
        if count and records_bytes > self._max_records_bytes:
            return 0
        self._parts += (length_part, head, offset_part, value_part, value, _NO_HEADERS)
        # _booked, inlined: a call less per record.
        self._records_bytes = records_bytes
        if count == 0:
            self._base_timestamp = self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        count += 1
        self._count = count
        return count

    def _append_record(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers | None,
    ) -> int:
        """Any record: a key, headers, a null value, or fields beyond the varint tables."""
        count = self._count
        ts_delta = timestamp_ms - self._base_timestamp if count else 0
        table = VARINT_TABLE
        table_offset = VARINT_TABLE_OFFSET
        high = _TABLE_HIGH
        head = (
            _ATTRIBUTES_AND_TS_DELTA[ts_delta + table_offset]
            if _TABLE_LOW <= ts_delta < high
            else _RECORD_ATTRIBUTES + encode_varint(ts_delta)
        )
        offset_part = table[count + table_offset] if count < high else encode_varint(count)
        headers_part = encode_headers(headers) if headers else _NO_HEADERS
        if value is None:
            value_part, value = _NULL, b""
        else:
            n = len(value)
            value_part = table[n + table_offset] if n < high else encode_varint(n)
        if key is None:
            key_part, key = _NULL, b""
        else:
            n = len(key)
            key_part = table[n + table_offset] if n < high else encode_varint(n)
        size = (
            len(head)
            + len(offset_part)
            + len(key_part)
            + len(key)
            + len(value_part)
            + len(value)
            + len(headers_part)
        )
        length_part = table[size + table_offset] if size < high else encode_varint(size)
        records_bytes = self._records_bytes + len(length_part) + size
        if count and records_bytes > self._max_records_bytes:
            return 0
        self._parts += (
            length_part,
            head,
            offset_part,
            key_part,
            key,
            value_part,
            value,
            headers_part,
        )
        return self._booked(count, records_bytes, timestamp_ms)

    def _booked(self, count: int, records_bytes: int, timestamp_ms: int) -> int:
        """Account for record number `count`, just added; returns the new record count."""
        self._records_bytes = records_bytes
        if count == 0:
            self._base_timestamp = self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        count += 1
        self._count = count
        return count

    def append_many(
        self,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """Append records sharing one timestamp and no headers; returns how many fitted.

        The bulk path for callers holding many records: one call, no per-record method
        dispatch. Stops at the first record that does not fit.
        """
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        table = VARINT_TABLE
        table_offset = VARINT_TABLE_OFFSET
        high = _TABLE_HIGH
        count = self._count
        base_timestamp = timestamp_ms if count == 0 else self._base_timestamp
        head = _RECORD_ATTRIBUTES + encode_varint(timestamp_ms - base_timestamp)
        # attributes + timestampDelta + header count
        fixed_bytes = len(head) + 1
        room = self._max_records_bytes - self._records_bytes
        parts: list[bytes] = []
        extend = parts.extend
        key_iter = iter(keys) if keys is not None else None
        start = count
        for value in values:
            key = next(key_iter) if key_iter is not None else None
            if key is None:
                key_part, key = _NULL, b""
            else:
                n = len(key)
                key_part = table[n + table_offset] if n < high else encode_varint(n)
            if value is None:
                value_part, value = _NULL, b""
            else:
                n = len(value)
                value_part = table[n + table_offset] if n < high else encode_varint(n)
            offset_part = table[count + table_offset] if count < high else encode_varint(count)
            size = (
                fixed_bytes
                + len(offset_part)
                + len(key_part)
                + len(key)
                + len(value_part)
                + len(value)
            )
            length_part = table[size + table_offset] if size < high else encode_varint(size)
            size += len(length_part)
            if size > room and count:
                break
            room -= size
            extend((length_part, head, offset_part, key_part, key, value_part, value, _NO_HEADERS))
            count += 1
        if count > start:
            self._parts += parts
            self._records_bytes = self._max_records_bytes - room
            self._base_timestamp = base_timestamp
            if start == 0 or timestamp_ms > self._max_timestamp:
                self._max_timestamp = timestamp_ms
            self._count = count
        return count - start

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
        if self._count == 0:
            raise InvalidRecordError("cannot build a batch with no records")
        records = b"".join(self._parts)
        return records if self._codec == CompressionType.NONE else compress(self._codec, records)

    def _fill_header(self, out: bytearray, size: int) -> None:
        HEADER.pack_into(
            out,
            0,
            self._base_offset,
            size - LOG_OVERHEAD,
            self._partition_leader_epoch,
            MAGIC_V2,
            0,  # crc, filled below
            self._attributes,
            self._count - 1,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self._count,
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
