"""RecordBatch v2 (magic 2): the batch header and its validation.

Layout of one batch (all integers big-endian):

    field                 type    offset  note
    baseOffset            int64   0       assigned by the log; rewritten in place on append
    batchLength           int32   8       bytes after this field (whole batch = 12 + this)
    partitionLeaderEpoch  int32   12      set by the leader; not covered by the CRC
    magic                 int8    16      2 (magic sits at 16 in every format version)
    crc                   uint32  17      CRC-32C of attributes .. end of batch
    attributes            int16   21      see the bit table below
    lastOffsetDelta       int32   23      last record's offset - baseOffset
    baseTimestamp         int64   27      first record's timestamp
    maxTimestamp          int64   35      largest timestamp (or the LogAppendTime)
    producerId            int64   43      -1 when not idempotent
    producerEpoch         int16   51
    baseSequence          int32   53
    recordCount           int32   57
    records               ...     61      compressed as one stream when a codec is set

attributes:

    bits 0-2  compression codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
    bit 3     timestamp type: 0 CreateTime, 1 LogAppendTime
    bit 4     transactional
    bit 5     control batch
    bit 6     delete horizon set (compaction, KIP-534: baseTimestamp holds the horizon)
    bits 7-15 unused

Why the CRC starts at `attributes`: the broker assigns baseOffset and partitionLeaderEpoch
to every batch it receives. Leaving those fields (and batchLength and magic, which must be
read before the CRC can be interpreted) outside the checksum lets the log rewrite them in
place without touching the records or recomputing a checksum over them.

The records section's layout and decoder are in record.py.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from ..errors import CorruptRecordError, InvalidRecordError
from ._scan import crc32c
from .compression import CompressionType, check_codec, decompress
from .record import CREATE_TIME, LOG_APPEND_TIME, Record, decode_records

HEADER = struct.Struct(
    ">"
    "q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
HEADER_BYTES = HEADER.size  # 61
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = struct.calcsize(">q")
PARTITION_LEADER_EPOCH_OFFSET = struct.calcsize(">qi")
MAGIC_OFFSET = struct.calcsize(">qii")
CRC_OFFSET = struct.calcsize(">qiib")
ATTRIBUTES_OFFSET = struct.calcsize(">qiibI")
LAST_OFFSET_DELTA_OFFSET = struct.calcsize(">qiibIh")
BASE_TIMESTAMP_OFFSET = struct.calcsize(">qiibIhi")
MAX_TIMESTAMP_OFFSET = struct.calcsize(">qiibIhiq")
RECORD_COUNT_OFFSET = struct.calcsize(">qiibIhiqqqhi")
# baseOffset + batchLength: the prefix every format version shares.
LOG_OVERHEAD = struct.calcsize(">qi")
# The smallest batchLength a v2 batch can have: the header after batchLength.
MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD

MAGIC_V2 = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 batch, field for field."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> CompressionType:
        return check_codec(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the cleaner first kept tombstones of this batch it stamped the time after
        which they may go (attribute bit 0x40) into baseTimestamp, as Kafka's cleaner does."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None


def read_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at `position`; the buffer must hold all 61 bytes."""
    if position + HEADER_BYTES > len(buffer):
        raise CorruptRecordError(
            f"batch header at position {position} needs {HEADER_BYTES} bytes, "
            f"buffer has {len(buffer) - position}"
        )
    return BatchHeader._make(HEADER.unpack_from(buffer, position))


def compute_crc(buffer: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC-32C of the checksummed part (attributes .. end) of the batch at `position`."""
    view = memoryview(buffer)
    return crc32c(view[position + ATTRIBUTES_OFFSET : position + size])


def check_header(header: BatchHeader, position: int) -> None:
    """The checks that need only the header (the storage node's hot path uses these)."""
    if header.magic != MAGIC_V2:
        raise InvalidRecordError(
            f"batch at position {position}: expected magic {MAGIC_V2}, found {header.magic}"
        )
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at position {position}: batchLength {header.batch_length} is smaller than "
            f"the {MIN_BATCH_LENGTH} bytes of header it must cover"
        )
    check_codec(header.attributes & COMPRESSION_MASK)
    if header.record_count < 0 or header.last_offset_delta < 0:
        raise InvalidRecordError(
            f"batch at position {position}: negative recordCount ({header.record_count}) "
            f"or lastOffsetDelta ({header.last_offset_delta})"
        )


def check_crc(buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> None:
    actual = compute_crc(buffer, position, header.size_in_bytes)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at position {position} (base offset {header.base_offset}): "
            f"stored CRC-32C {header.crc:#010x}, computed {actual:#010x}"
        )


class RecordBatch:
    """A v2 batch over a buffer: header fields at hand, records decoded only when asked."""

    __slots__ = ("_buffer", "position", "header")

    def __init__(self, buffer: bytes | bytearray | memoryview, position: int = 0) -> None:
        self._buffer = buffer
        self.position = position
        self.header = read_header(buffer, position)
        check_header(self.header, position)
        if position + self.header.size_in_bytes > len(buffer):
            raise CorruptRecordError(
                f"batch at position {position} claims {self.header.size_in_bytes} bytes, "
                f"buffer has {len(buffer) - position}"
            )

    @property
    def size_in_bytes(self) -> int:
        return self.header.size_in_bytes

    def raw(self) -> memoryview:
        return memoryview(self._buffer)[self.position : self.position + self.size_in_bytes]

    def is_valid(self) -> bool:
        return compute_crc(self._buffer, self.position, self.size_in_bytes) == self.header.crc

    def validate(self) -> None:
        check_crc(self._buffer, self.position, self.header)

    def records_section(self) -> bytes:
        """The records bytes, decompressed."""
        start = self.position + HEADER_BYTES
        data = memoryview(self._buffer)[start : self.position + self.size_in_bytes]
        return decompress(self.header.attributes & COMPRESSION_MASK, data)

    def records(self, topic: str = "", partition: int = -1) -> list[Record]:
        """Decode every record, checking counts, lengths and offset deltas."""
        return decode_records(self.records_section(), self.header, self.position, topic, partition)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(base_offset={h.base_offset}, last_offset={h.last_offset}, "
            f"count={h.record_count}, size={h.size_in_bytes}, codec={h.compression.name})"
        )


def set_base_offset(buffer: bytearray | memoryview, position: int, base_offset: int) -> None:
    _INT64.pack_into(buffer, position + BASE_OFFSET_OFFSET, base_offset)


def stamp_log_append_time(buffer: bytearray, position: int, timestamp_ms: int) -> None:
    """Set timestamp type LogAppendTime and maxTimestamp in place, then recompute the CRC.

    Records keep their deltas: readers of a LogAppendTime batch take maxTimestamp as every
    record's timestamp, as Kafka's do.
    """
    (attributes,) = struct.unpack_from(">h", buffer, position + ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buffer, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buffer, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    (length,) = struct.unpack_from(">i", buffer, position + LENGTH_OFFSET)
    crc = compute_crc(buffer, position, length + LOG_OVERHEAD)
    _UINT32.pack_into(buffer, position + CRC_OFFSET, crc)
