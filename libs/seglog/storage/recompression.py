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
bytes do not depend on the codec: it is compressed again whole, with no per-record work. A
compressed batch is inflated once: validation inflates it to check its records (through the
process's inflation budget, records/inflation_budget.py) and hands the section to `rebody`
while it is still held and counted there, which compresses it in the topic's codec; an
uncompressed batch is compressed from the input's bytes as they are, with no copy. (Before,
the batch was inflated a second time here, outside the budget: a 64 MiB batch counted once
and held twice.) A batch validation did not hand on (`recompress` called on its own) is
inflated here, through the same budget.

Offsets are then assigned as for any batch (baseOffset rewritten, offset deltas kept), so a
consumer reads the same offsets, keys, values and headers. Control batches (transaction
markers) are left as written, as Kafka writes them uncompressed. A rebuilt batch larger than
`max.message.bytes` refuses the whole input (RECORD_TOO_LARGE), as Kafka's
RecordBatchTooLargeException does after recompressing.
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
from ..records.compression import CompressionType, compress, decompress_into_budget
from ..records.inflation_budget import PROCESS_BUDGET
from .config import LogConfig
from .topic_config_values import COMPRESSION_PRODUCER
from .validation import Rebody, ValidatedRecords

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


def rebody_for(config: LogConfig) -> Rebody | None:
    """What validation hands each inflated section to (validation.py's `rebody`): the
    section in the topic's codec, for a batch whose codec is not the topic's."""
    target = target_codec(config)
    if target is None:
        return None
    level = _level(config, target)

    def rebody(header: BatchHeader, section: bytes | bytearray | memoryview) -> bytes | None:
        if _keeps(header, target):
            return None
        return compress(target, memoryview(section), level)

    return rebody


def _body(
    validated: ValidatedRecords,
    pos: int,
    header: BatchHeader,
    target: CompressionType,
    config: LogConfig,
) -> bytes:
    """The batch's records section in the topic's codec: validation's when it made it, else
    compressed from the input (uncompressed) or inflated through the budget first."""
    body = validated.bodies.get(pos)
    if body is not None:
        return body
    level = _level(config, target)
    raw = validated.view[pos + HEADER_BYTES : pos + header.size_in_bytes]
    codec = header.attributes & COMPRESSION_MASK
    if codec == CompressionType.NONE:
        return compress(target, raw, level)
    with PROCESS_BUDGET.reservation() as grow:
        records = decompress_into_budget(codec, raw, config.max_uncompressed_batch_bytes, grow)
        return compress(target, memoryview(records), level)


def recompress(validated: ValidatedRecords, config: LogConfig) -> ValidatedRecords:
    """`validated` with each batch in the topic's codec (itself when nothing changes)."""
    target = target_codec(config)
    if target is None or all(_keeps(h, target) for _, h in validated.batches):
        return validated
    view = validated.view
    parts: list[bytes | bytearray | memoryview] = []
    for pos, header in validated.batches:
        size = header.size_in_bytes
        if _keeps(header, target):
            parts.append(view[pos : pos + size])
            continue
        body = _body(validated, pos, header, target, config)
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
