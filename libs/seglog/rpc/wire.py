"""The storage node's fetch stream writes `FetchResponse` wire bytes itself, so a chunk of
file bytes goes out without a protobuf message object built around it (a measured ~2x on
1 MiB chunks). Clients parse the bytes as the ordinary generated message.

Protobuf wire format, proto3 rules (a field at its default value is left out):

    field 1 topic            string  tag 0x0A  varint length, UTF-8
    field 2 partition        int32   tag 0x10  varint (negative: 10-byte two's complement)
    field 3 error            enum    tag 0x18  varint
    field 4 error_message    string  tag 0x22  varint length, UTF-8
    field 5 high_watermark   int64   tag 0x28  varint
    field 6 log_start_offset int64   tag 0x30  varint
    field 7 records          bytes   tag 0x3A  varint length, raw bytes

The output equals `FetchResponse(...).SerializeToString()` byte for byte (a test holds it).
"""

from __future__ import annotations

_MASK_64 = (1 << 64) - 1


def _varint(value: int) -> bytes:
    value &= _MASK_64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def fetch_response_prefix(
    topic: str,
    partition: int,
    high_watermark: int,
    log_start_offset: int,
    records_length: int,
    error: int = 0,
    error_message: str = "",
) -> bytes:
    """Everything of the message before the records' bytes."""
    parts = []
    if topic:
        encoded = topic.encode()
        parts += [b"\x0a", _varint(len(encoded)), encoded]
    if partition:
        parts += [b"\x10", _varint(partition)]
    if error:
        parts += [b"\x18", _varint(error)]
    if error_message:
        encoded = error_message.encode()
        parts += [b"\x22", _varint(len(encoded)), encoded]
    if high_watermark:
        parts += [b"\x28", _varint(high_watermark)]
    if log_start_offset:
        parts += [b"\x30", _varint(log_start_offset)]
    if records_length:
        parts += [b"\x3a", _varint(records_length)]
    return b"".join(parts)


def encode_fetch_response(
    topic: str,
    partition: int,
    high_watermark: int,
    log_start_offset: int,
    records: bytes | memoryview = b"",
    error: int = 0,
    error_message: str = "",
) -> bytes:
    prefix = fetch_response_prefix(
        topic, partition, high_watermark, log_start_offset, len(records), error, error_message
    )
    return prefix + records if records else prefix


def identity(data: bytes) -> bytes:
    """The (de)serializer for a payload that is already wire bytes."""
    return data
