"""What one partition of `__consumer_offsets` holds once read back: each group's committed
offsets and metadata, the newest record per key winning, as compaction would leave it (the
record formats are offsets_formats.py's). Reading back survives damage: a batch that fails
its CRC or does not decode, or a record that does not parse, is logged and skipped (its
groups answer from their earlier records) instead of failing every group of the partition."""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

from seglog.errors import SeglogError
from seglog.records import RecordBatch
from seglog.records.batch import HEADER_BYTES, LOG_OVERHEAD

from .consumer_group_records import CONSUMER_GROUP_RECORD_TYPES, group_id_of_key
from .offsets_formats import (
    GROUP_METADATA_KEY_VERSION,
    CommittedOffset,
    GroupMetadata,
    decode_group_key,
    decode_group_value,
    decode_offset_key,
    decode_offset_value,
    key_type,
)

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23


GroupOffsets = dict[tuple[str, int], CommittedOffset]


@dataclass
class PartitionContents:
    """What one `__consumer_offsets` partition holds, as compaction would leave it."""

    offsets: dict[str, GroupOffsets] = field(default_factory=dict)
    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    # KIP-848 consumer groups' records (consumer_group_records.py), newest value per key,
    # by group: replayed by the consumer group coordinator when it first touches a group.
    consumer_groups: dict[str, dict[bytes, bytes]] = field(default_factory=dict)


def apply_batches(contents: PartitionContents, partition: int, records: bytes) -> int:
    """Apply every whole batch of a fetch; return the offset after the last one. A batch
    that is corrupt is logged and skipped, found by its length and offsets alone."""
    pos = 0
    next_offset = -1
    while len(records) - pos >= HEADER_BYTES:
        base_offset, length = _BASE_AND_LENGTH.unpack_from(records, pos)
        if length < HEADER_BYTES - LOG_OVERHEAD or pos + LOG_OVERHEAD + length > len(records):
            break
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(records, pos + _LAST_OFFSET_DELTA_AT)
        try:
            batch = RecordBatch(records, pos)
            batch.validate()
            _apply(contents, batch)
        except (SeglogError, ValueError, struct.error) as exc:
            logger.error(
                "%s-%d: skipping the corrupt batch at offset %d: %s",
                OFFSETS_TOPIC,
                partition,
                base_offset,
                exc,
            )
        next_offset = max(next_offset, base_offset + max(delta, 0) + 1)
        pos += LOG_OVERHEAD + length
    return next_offset


def _apply(contents: PartitionContents, batch: RecordBatch) -> None:
    if batch.header.is_control:
        return
    for record in batch.records():
        if record.key is None:
            continue
        try:
            _apply_record(contents, record.key, record.value)
        except (SeglogError, ValueError, struct.error) as exc:
            logger.error(
                "%s: skipping the record at offset %d: %s", OFFSETS_TOPIC, record.offset, exc
            )


def apply_consumer_group_record(
    contents: PartitionContents, key: bytes, value: bytes | None
) -> None:
    group_id = group_id_of_key(key)
    held = contents.consumer_groups.setdefault(group_id, {})
    if value is None:
        held.pop(key, None)
        if not held:
            del contents.consumer_groups[group_id]
    else:
        held[key] = value


def _apply_record(contents: PartitionContents, key: bytes, value: bytes | None) -> None:
    if key_type(key) in CONSUMER_GROUP_RECORD_TYPES:
        apply_consumer_group_record(contents, key, value)
        return
    if key_type(key) == GROUP_METADATA_KEY_VERSION:
        group_id = decode_group_key(key)
        if value is None:
            contents.groups.pop(group_id, None)
        else:
            contents.groups[group_id] = decode_group_value(value)
        return
    group_id, topic, partition = decode_offset_key(key)
    if value is None:
        offsets = contents.offsets.get(group_id)
        if offsets is not None:
            offsets.pop((topic, partition), None)
            if not offsets:
                del contents.offsets[group_id]
        return
    contents.offsets.setdefault(group_id, {})[(topic, partition)] = decode_offset_value(value)
