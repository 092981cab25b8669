"""Legacy message sets (magic 0 and 1): read, validate, and up-convert to RecordBatch v2.

One legacy entry ("message" in a message set), all integers big-endian:

    field        type    note
    offset       int64   v1 inner messages of a compressed wrapper: relative (0..n-1)
    messageSize  int32   bytes after this field
    crc          uint32  CRC-32 (zlib's) of magic .. end of message
    magic        int8    0 or 1 (at byte 16, where v2 keeps its magic too)
    attributes   int8    bits 0-2 codec (1 gzip, 2 snappy, 3 lz4), bit 3 timestamp type (v1)
    timestamp    int64   v1 only
    key          int32 length (-1 null) + bytes
    value        int32 length (-1 null) + bytes

A compressed entry (a "wrapper") holds, as its compressed value, an inner message set of
uncompressed messages. The wrapper's offset is the offset of its last inner message; in v1
the inner offsets are relative, so inner absolute offset = wrapper offset - last relative
offset + relative offset. v0 inner offsets are already absolute.

Magic 0 with lz4 used a frame whose header checksum was computed over the magic bytes too
(KAFKA-3160); that framing is not read here and raises UnsupportedCompressionError.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from ..errors import CorruptRecordError, UnsupportedCompressionError
from .batch import NO_TIMESTAMP
from .compression import UNBOUNDED_BYTES, CompressionType, decompress
from .record import CREATE_TIME, LOG_APPEND_TIME, Record
from .rewrite import encode_batch

ENTRY_PREFIX = struct.Struct(">qiIbb")  # offset, messageSize, crc, magic, attributes
ENTRY_PREFIX_BYTES = ENTRY_PREFIX.size  # 18
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
# crc(4) + magic(1) + attributes(1) + key length(4) + value length(4)
MIN_MESSAGE_SIZE_V0 = 14
MIN_MESSAGE_SIZE_V1 = MIN_MESSAGE_SIZE_V0 + 8
CRC_START = struct.calcsize(">qiI")  # the CRC covers magic (at 16) .. end
LEGACY_CODEC_MASK = 0x07
LEGACY_TIMESTAMP_TYPE_MASK = 0x08


class LegacyMessage(NamedTuple):
    offset: int
    magic: int
    attributes: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    size_in_bytes: int

    @property
    def codec(self) -> int:
        return self.attributes & LEGACY_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        if self.magic > 0 and self.attributes & LEGACY_TIMESTAMP_TYPE_MASK:
            return LOG_APPEND_TIME
        return CREATE_TIME


def read_message(buffer: bytes | bytearray | memoryview, position: int) -> LegacyMessage:
    """Parse and validate (CRC-32, lengths) the legacy entry at `position`."""
    available = len(buffer) - position
    if available < ENTRY_PREFIX_BYTES:
        raise CorruptRecordError(
            f"legacy message at position {position}: need {ENTRY_PREFIX_BYTES} header bytes, "
            f"have {available}"
        )
    offset, size, crc, magic, attributes = ENTRY_PREFIX.unpack_from(buffer, position)
    if magic not in (0, 1):
        raise CorruptRecordError(f"legacy message at position {position}: magic {magic}")
    min_size = MIN_MESSAGE_SIZE_V1 if magic == 1 else MIN_MESSAGE_SIZE_V0
    end = position + 12 + size
    if size < min_size or end > len(buffer):
        raise CorruptRecordError(
            f"legacy message at position {position}: messageSize {size} (minimum {min_size}, "
            f"{available - 12} bytes available)"
        )
    view = memoryview(buffer)
    actual = zlib.crc32(view[position + CRC_START : end])
    if actual != crc:
        raise CorruptRecordError(
            f"legacy message at position {position} (offset {offset}): stored CRC-32 "
            f"{crc:#010x}, computed {actual:#010x}"
        )
    pos = position + ENTRY_PREFIX_BYTES
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _TIMESTAMP.unpack_from(buffer, pos)
        pos += 8
    key, pos = _read_bytes(view, pos, end, position)
    value, pos = _read_bytes(view, pos, end, position)
    if pos != end:
        raise CorruptRecordError(
            f"legacy message at position {position}: {end - pos} bytes after its value"
        )
    return LegacyMessage(offset, magic, attributes, timestamp, key, value, 12 + size)


def _read_bytes(view: memoryview, pos: int, end: int, position: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError(f"legacy message at position {position}: length field cut")
    (n,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError(
            f"legacy message at position {position}: field of {n} bytes runs past its end"
        )
    return bytes(view[pos : pos + n]), pos + n


def inner_messages(
    wrapper: LegacyMessage, max_uncompressed_bytes: int = UNBOUNDED_BYTES
) -> list[LegacyMessage]:
    """The messages inside a compressed wrapper, with absolute offsets and timestamps; the
    wrapper may decompress to at most `max_uncompressed_bytes`."""
    if wrapper.codec == CompressionType.LZ4 and wrapper.magic == 0:
        raise UnsupportedCompressionError(
            "magic 0 lz4 messages use Kafka's pre-KIP-57 frame checksum, which is not read"
        )
    if wrapper.value is None:
        raise CorruptRecordError(f"compressed wrapper at offset {wrapper.offset} has no value")
    data = decompress(wrapper.codec, wrapper.value, max_uncompressed_bytes)
    inner = []
    pos = 0
    while pos < len(data):
        message = read_message(data, pos)
        if message.codec != CompressionType.NONE:
            raise CorruptRecordError(
                f"wrapper at offset {wrapper.offset} holds a compressed message (nested)"
            )
        inner.append(message)
        pos += message.size_in_bytes
    if not inner:
        raise CorruptRecordError(f"compressed wrapper at offset {wrapper.offset} is empty")
    if wrapper.magic == 1:
        shift = wrapper.offset - inner[-1].offset
        log_append = wrapper.timestamp_type == LOG_APPEND_TIME
        inner = [
            m._replace(
                offset=m.offset + shift,
                timestamp_ms=wrapper.timestamp_ms if log_append else m.timestamp_ms,
            )
            for m in inner
        ]
    return inner


def upconvert(message: LegacyMessage, max_uncompressed_bytes: int = UNBOUNDED_BYTES) -> bytes:
    """One legacy entry (plain or a wrapper) as one v2 batch with the same offsets and codec.

    Offsets are kept exactly: the batch's baseOffset is the first message's offset and each
    record's offsetDelta its distance from it (gaps, as compaction leaves them, stay gaps).
    A LogAppendTime wrapper's timestamp becomes each record's timestamp (the batch is
    CreateTime with explicit timestamps; what a reader sees is the same).
    """
    return upconvert_counted(message, max_uncompressed_bytes)[0]


def upconvert_counted(
    message: LegacyMessage, max_uncompressed_bytes: int = UNBOUNDED_BYTES
) -> tuple[bytes, int]:
    """`upconvert`, with the bytes its wrapper decompressed to (0 for a plain message)."""
    compressed = message.codec != CompressionType.NONE
    messages = inner_messages(message, max_uncompressed_bytes) if compressed else [message]
    inflated = sum(m.size_in_bytes for m in messages) if compressed else 0
    base_offset = messages[0].offset
    batch = encode_batch(
        [Record(m.offset, m.timestamp_ms, m.key, m.value, ()) for m in messages],
        base_offset=base_offset,
        last_offset_delta=messages[-1].offset - base_offset,
        compression=message.codec,
    )
    return batch, inflated


def records_of(message: LegacyMessage) -> list[Record]:
    messages = inner_messages(message) if message.codec != CompressionType.NONE else [message]
    return [Record(m.offset, m.timestamp_ms, m.key, m.value, ()) for m in messages]
