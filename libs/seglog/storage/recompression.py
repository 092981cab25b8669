"""The leader's recompression: a topic whose `compression.type` names a codec stores every
batch in that codec, whatever the producer sent, as Kafka's LogValidator does.

Only batches whose codec differs from the topic's are rebuilt; with `producer` (Kafka's
default), or when every batch already has the topic's codec, the validated input is handed
on untouched and the append stays the zero-copy path (storage/validation.py's
`assign_offsets`). A rebuilt batch keeps its header but for three fields:

- attributes bits 0-2: the topic's codec (timestamp type, transactional and control bits
  kept);
- batchLength: 49 + the new records section's size;
- crc: CRC-32C over attributes to the end, recomputed.

The records section (everything after the 61-byte header) is one stream of records, whose
bytes do not depend on the codec: it is decompressed (bounded by
`max.uncompressed.batch.bytes`, as validation is) and compressed again whole, with no
per-record work. Offsets are then assigned as for any batch (baseOffset rewritten, offset
deltas kept), so a consumer reads the same offsets, keys, values and headers. Control
batches (transaction markers) are left as written, as Kafka writes them uncompressed. A
rebuilt batch larger than `max.message.bytes` refuses the whole input
(RECORD_TOO_LARGE), as Kafka's RecordBatchTooLargeException does after recompressing.
"""

from __future__ import annotations

from crc32c import crc32c

from ..errors import RecordTooLargeError
from ..records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    BatchHeader,
)
from ..records.compression import CompressionType, compress, decompress
from .config import LogConfig
from .topic_config_values import COMPRESSION_PRODUCER
from .validation import ValidatedRecords

_CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def target_codec(config: LogConfig) -> CompressionType | None:
    """The codec the topic stores, None with `producer` (the producer's is kept)."""
    if config.compression_type == COMPRESSION_PRODUCER:
        return None
    return _CODECS[config.compression_type]


def _level(config: LogConfig, codec: CompressionType) -> int | None:
    if codec is CompressionType.GZIP:
        return config.compression_gzip_level
    if codec is CompressionType.LZ4:
        return config.compression_lz4_level
    if codec is CompressionType.ZSTD:
        return config.compression_zstd_level
    return None


def _keeps(header: BatchHeader, target: int) -> bool:
    return header.attributes & COMPRESSION_MASK == target or bool(header.attributes & CONTROL_MASK)


def recompress(validated: ValidatedRecords, config: LogConfig) -> ValidatedRecords:
    """`validated` with each batch in the topic's codec (itself when nothing changes)."""
    target = target_codec(config)
    if target is None or all(_keeps(h, target) for _, h in validated.batches):
        return validated
    view = validated.view
    level = _level(config, target)
    parts: list[bytes | bytearray | memoryview] = []
    for pos, header in validated.batches:
        size = header.size_in_bytes
        if _keeps(header, target):
            parts.append(view[pos : pos + size])
            continue
        records = decompress(
            header.attributes & COMPRESSION_MASK,
            view[pos + HEADER_BYTES : pos + size],
            config.max_uncompressed_batch_bytes,
        )
        body = compress(target, records, level)
        rebuilt = bytearray(HEADER_BYTES + len(body))
        HEADER.pack_into(
            rebuilt,
            0,
            *header._replace(
                batch_length=HEADER_BYTES - LOG_OVERHEAD + len(body),
                attributes=(header.attributes & ~COMPRESSION_MASK) | target,
                crc=0,
            ),
        )
        rebuilt[HEADER_BYTES:] = body
        crc = crc32c(memoryview(rebuilt)[ATTRIBUTES_OFFSET:])
        rebuilt[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        if len(rebuilt) > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch at position {pos} is {len(rebuilt)} bytes once recompressed with "
                f"{config.compression_type} (compression.type), over max.message.bytes "
                f"{config.max_message_bytes}"
            )
        parts.append(rebuilt)
    return ValidatedRecords.of_checked(memoryview(b"".join(parts)), validated.validated_at_ms)
