"""Batches written from decoded records rather than appended ones: what compaction leaves
(records keeping their own offsets, gaps allowed, a delete horizon in baseTimestamp; or an
empty batch that keeps a removed batch's offsets) and what legacy up-conversion produces.
Not a hot path: one encode per record."""

from __future__ import annotations

from collections.abc import Sequence

from crc32c import crc32c

from ..errors import InvalidRecordError
from .batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
)
from .builder import encode_headers
from .compression import CompressionType, compress
from .record import Record
from .varint import encode_varint

_RECORD_ATTRIBUTES = b"\x00"
_NULL = encode_varint(-1)
_NO_HEADERS = encode_varint(0)


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int,
    last_offset_delta: int,
    compression: int = CompressionType.NONE,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    max_timestamp: int | None = None,
    base_timestamp: int | None = None,
) -> bytes:
    """A batch whose records keep their own offsets (gaps allowed): what compaction writes
    and what legacy up-conversion produces. Not a hot path: one encode per record.
    `base_timestamp` defaults to the first record's; the cleaner passes a delete horizon
    (with attribute bit 0x40), and record timestamps stay exact as deltas from it."""
    if not records:
        raise InvalidRecordError("cannot encode a batch with no records")
    base_ts = records[0].timestamp_ms if base_timestamp is None else base_timestamp
    parts = []
    for record in records:
        body = bytearray(_RECORD_ATTRIBUTES)
        body += encode_varint(record.timestamp_ms - base_ts)
        body += encode_varint(record.offset - base_offset)
        for field in (record.key, record.value):
            if field is None:
                body += _NULL
            else:
                body += encode_varint(len(field))
                body += field
        body += encode_headers(record.headers) if record.headers else _NO_HEADERS
        parts.append(encode_varint(len(body)))
        parts.append(bytes(body))
    section = b"".join(parts)
    if compression != CompressionType.NONE:
        section = compress(compression, section)
    out = bytearray(HEADER_BYTES) + section
    if max_timestamp is None:
        max_timestamp = max(r.timestamp_ms for r in records)
    HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        (attributes & ~0x07) | compression,
        last_offset_delta,
        base_ts,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out[ATTRIBUTES_OFFSET - 4 : ATTRIBUTES_OFFSET] = crc32c(
        memoryview(out)[ATTRIBUTES_OFFSET:]
    ).to_bytes(4, "big")
    return bytes(out)


def encode_empty_batch(header: BatchHeader) -> bytes:
    """A batch with no records that keeps `header`'s offsets, producer fields and max
    timestamp (Kafka's DefaultRecordBatch.writeEmptyHeader): what the cleaner leaves when it
    removes every record of a batch whose last offset must survive."""
    out = bytearray(HEADER_BYTES)
    HEADER.pack_into(
        out,
        0,
        header.base_offset,
        HEADER_BYTES - LOG_OVERHEAD,
        header.partition_leader_epoch,
        MAGIC_V2,
        0,
        header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK),
        header.last_offset_delta,
        header.max_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    out[ATTRIBUTES_OFFSET - 4 : ATTRIBUTES_OFFSET] = crc32c(
        memoryview(out)[ATTRIBUTES_OFFSET:]
    ).to_bytes(4, "big")
    return bytes(out)
