"""Zigzag varints, as Kafka's ByteUtils writes them (protobuf's encoding).

A signed value v is first zigzag-mapped to an unsigned one, (v << 1) ^ (v >> 63), so that
small negative numbers stay short: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3. The unsigned value is
then written 7 bits at a time, least significant group first, with the high bit of each byte
set while more bytes follow. A varint (int32) takes at most 5 bytes, a varlong at most 10.

The encoder keeps a table of the encodings of small values (-2**13 .. 2**14): record
lengths, offset deltas, key and value lengths of ordinary records all fall in it, so the
builder's per-record work is a list index instead of a loop.
"""

from __future__ import annotations

from ..errors import CorruptRecordError

_TABLE_MIN = -(1 << 13)
_TABLE_MAX = 1 << 14


def _encode_unsigned(unsigned: int) -> bytes:
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def encode_varint(value: int) -> bytes:
    """The zigzag varint encoding of a signed 64-bit value."""
    if _TABLE_MIN <= value < _TABLE_MAX:
        return VARINT_TABLE[value - _TABLE_MIN]
    return _encode_unsigned(zigzag(value) & 0xFFFFFFFFFFFFFFFF)


VARINT_TABLE: list[bytes] = [_encode_unsigned(zigzag(v)) for v in range(_TABLE_MIN, _TABLE_MAX)]
VARINT_TABLE_OFFSET = -_TABLE_MIN

# One-byte varints decode through a table: byte b (< 0x80) holds zigzag value b.
ONE_BYTE_VALUES = [(b >> 1) ^ -(b & 1) for b in range(0x80)]


def decode_varint(buffer: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the varint at `pos`; return (value, position after it).

    Raises CorruptRecordError when the buffer ends inside the varint or the varint is longer
    than the 10 bytes a 64-bit value can need.
    """
    try:
        b = buffer[pos]
    except IndexError:
        raise CorruptRecordError(
            f"varint at position {pos} runs past the end of the buffer ({len(buffer)} bytes)"
        ) from None
    if b < 0x80:
        return ONE_BYTE_VALUES[b], pos + 1
    result = b & 0x7F
    shift = 7
    start = pos
    pos += 1
    end = len(buffer)
    while True:
        if pos >= end:
            raise CorruptRecordError(
                f"varint at position {start} runs past the end of the buffer ({end} bytes)"
            )
        b = buffer[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError(f"varint at position {start} is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def size_of_varint(value: int) -> int:
    unsigned = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while unsigned >= 0x80:
        unsigned >>= 7
        size += 1
    return size
