"""Control batches: the COMMIT and ABORT markers that end a transaction on a partition, in
Kafka's format (EndTransactionMarker, ControlRecordType, MemoryRecords.withEndTransactionMarker).

A marker is a v2 batch (layout in batch.py) with attributes 0x30 (control 0x20 and
transactional 0x10, no compression), the producer's id and epoch, baseSequence -1, and one
record (record.py's layout), offsetDelta 0, timestampDelta 0, no headers:

    key    int16 version = 0, int16 type (0 ABORT, 1 COMMIT)                4 bytes
    value  int16 version = 0, int32 coordinator_epoch                      6 bytes

Kafka reads a key version > 0 the same (only the type is used) and refuses a key shorter than
4 bytes; so does `read_marker`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from ..errors import CorruptRecordError
from .batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    BatchHeader,
)
from .record import decode_records
from .varint import encode_varint

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlMarker(NamedTuple):
    """What a control batch says: COMMIT or ABORT, and the coordinator's epoch."""

    committed: bool
    coordinator_epoch: int


def build_marker(
    producer_id: int,
    producer_epoch: int,
    marker: ControlMarker,
    *,
    timestamp_ms: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch (base offset 0: the log assigns it)."""
    key = _KEY.pack(0, COMMIT if marker.committed else ABORT)
    value = _VALUE.pack(0, marker.coordinator_epoch)
    # attributes, timestampDelta 0, offsetDelta 0, key, value, no headers
    body = b"\x00\x00\x00" + encode_varint(len(key)) + key
    body += encode_varint(len(value)) + value + encode_varint(0)
    record = encode_varint(len(body)) + body
    size = HEADER_BYTES + len(record)
    out = bytearray(HEADER_BYTES) + record
    HEADER.pack_into(
        out,
        0,
        0,
        size - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        CONTROL_MASK | TRANSACTIONAL_MASK,
        0,
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        NO_SEQUENCE,
        1,
    )
    crc = crc32c(memoryview(out)[ATTRIBUTES_OFFSET:size])
    out[ATTRIBUTES_OFFSET - 4 : ATTRIBUTES_OFFSET] = crc.to_bytes(4, "big")
    return bytes(out)


def read_marker(batch: bytes | bytearray | memoryview, header: BatchHeader) -> ControlMarker:
    """The marker of the control batch `batch` (its bytes from its first byte; uncompressed,
    as every writer of markers writes them). CorruptRecordError when it is not one."""
    if not header.attributes & CONTROL_MASK or header.attributes & 0x07:
        raise CorruptRecordError("not an uncompressed control batch")
    records = list(decode_records(bytes(batch[HEADER_BYTES : header.size_in_bytes]), header))
    if not records or records[0].key is None or len(records[0].key) < _KEY.size:
        raise CorruptRecordError(f"control batch at offset {header.base_offset}: no marker key")
    _, kind = _KEY.unpack_from(records[0].key)
    epoch = -1
    value = records[0].value
    if value is not None and len(value) >= _VALUE.size:
        epoch = _VALUE.unpack_from(value)[1]
    if kind not in (ABORT, COMMIT):
        # Other control types (Kafka's LEADER_CHANGE, SNAPSHOT_*) end no transaction.
        raise CorruptRecordError(f"control batch at offset {header.base_offset}: type {kind}")
    return ControlMarker(kind == COMMIT, epoch)
