"""What one partition of `__consumer_offsets` holds once read back: each group's committed
offsets and metadata, the newest record per key winning, as compaction would leave it (the
record formats are offsets_formats.py's). Reading back survives damage: a batch that fails
its CRC or does not decode, or a record that does not parse, is logged and skipped (its
groups answer from their earlier records) instead of failing every group of the partition.

Transactional offsets (TxnOffsetCommit) are records in a transactional batch carrying the
producer's id: they are held pending, per producer id, until a control batch of that
producer (Kafka's COMMIT/ABORT marker: key int16 version 0 + int16 type, 0 ABORT, 1 COMMIT)
commits or drops them, as Kafka's OffsetMetadataManager replays them. On commit, a pending
offset replaces the committed one only if its record is later in the log (Kafka compares
record offsets: a plain commit written after the transaction's offsets wins over them).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

from seglog.errors import SeglogError
from seglog.records import RecordBatch
from seglog.records.batch import HEADER_BYTES, LOG_OVERHEAD

from .consumer_group_records import (
    CONSUMER_GROUP_RECORD_TYPES,
    SHARE_GROUP_RECORD_TYPES,
    group_id_of_key,
)
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
_CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_ABORT, CONTROL_COMMIT = 0, 1


GroupOffsets = dict[tuple[str, int], CommittedOffset]
# (group, topic, partition) -> the log offset of the record an offset came from.
RecordOffsets = dict[tuple[str, str, int], int]


@dataclass
class PendingOffsets:
    """One producer's transactional offsets not yet committed or aborted: by group, and the
    log offset of each one's record."""

    offsets: dict[str, GroupOffsets] = field(default_factory=dict)
    record_offsets: RecordOffsets = field(default_factory=dict)


@dataclass
class PartitionContents:
    """What one `__consumer_offsets` partition holds, as compaction would leave it."""

    offsets: dict[str, GroupOffsets] = field(default_factory=dict)
    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    record_offsets: RecordOffsets = field(default_factory=dict)
    # Producer id -> its transactional offsets awaiting their marker.
    pending: dict[int, PendingOffsets] = field(default_factory=dict)
    # The log offset after the last batch applied (where reading the tail goes on from).
    next_offset: int = 0
    # KIP-848 consumer groups' records (consumer_group_records.py), newest value per key,
    # by group: replayed by the consumer group coordinator when it first touches a group.
    consumer_groups: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    # Share groups' records (share/share_group_records.py), the same way.
    share_groups: dict[str, dict[bytes, bytes]] = field(default_factory=dict)

    def has_pending(self, group_id: str) -> bool:
        return any(group_id in p.offsets for p in self.pending.values())

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        for pending in self.pending.values():
            out.update(pending.offsets.get(group_id, {}))
        return out

    def add_pending(
        self, producer_id: int, group_id: str, entries: GroupOffsets, record_offset: int
    ) -> None:
        pending = self.pending.setdefault(producer_id, PendingOffsets())
        pending.offsets.setdefault(group_id, {}).update(entries)
        for topic, partition in entries:
            pending.record_offsets[(group_id, topic, partition)] = record_offset

    def drop_pending(self, group_id: str, tp: tuple[str, int]) -> None:
        """A tombstone for the partition's offset removes what transactions hold pending
        for it too (Kafka's replay of an offset tombstone)."""
        for producer_id, pending in list(self.pending.items()):
            offsets = pending.offsets.get(group_id)
            if offsets is None or offsets.pop(tp, None) is None:
                continue
            pending.record_offsets.pop((group_id, *tp), None)
            if not offsets:
                del pending.offsets[group_id]
            if not pending.offsets:
                del self.pending[producer_id]

    def set_committed(self, group_id: str, entries: GroupOffsets, record_offset: int) -> None:
        self.offsets.setdefault(group_id, {}).update(entries)
        for topic, partition in entries:
            self.record_offsets[(group_id, topic, partition)] = record_offset

    def complete(self, producer_id: int, committed: bool, marker_offset: int | None = None) -> int:
        """The producer's pending offsets committed (each only over an older record) or
        dropped; returns how many were pending. `marker_offset`: where the marker sits in
        the log; only offsets written before it are its transaction's (reading the tail
        again can meet an old marker after this store already holds the producer's next
        transaction's offsets, which stay pending)."""
        pending = self.pending.pop(producer_id, None)
        if pending is None:
            return 0
        count = 0
        later = PendingOffsets()
        for group_id, offsets in pending.offsets.items():
            for tp, offset in offsets.items():
                key = (group_id, *tp)
                at = pending.record_offsets.get(key, -1)
                if marker_offset is not None and at > marker_offset:
                    later.offsets.setdefault(group_id, {})[tp] = offset
                    later.record_offsets[key] = at
                    continue
                count += 1
                held = self.offsets.get(group_id, {}).get(tp)
                if committed and (held is None or at > self.record_offsets.get(key, -1)):
                    self.offsets.setdefault(group_id, {})[tp] = offset
                    self.record_offsets[key] = at
        if later.offsets:
            self.pending[producer_id] = later
        return count
        for group_id, offsets in pending.offsets.items():
            for tp, offset in offsets.items():
                key = (group_id, *tp)
                at = pending.record_offsets.get(key, -1)
                held = self.offsets.get(group_id, {}).get(tp)
                if held is None or at > self.record_offsets.get(key, -1):
                    self.offsets.setdefault(group_id, {})[tp] = offset
                    self.record_offsets[key] = at
        return count


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
    contents.next_offset = max(contents.next_offset, next_offset)
    return next_offset


def _apply(contents: PartitionContents, batch: RecordBatch) -> None:
    header = batch.header
    if header.is_control:
        for record in batch.records():
            if record.key is not None and len(record.key) >= _CONTROL_KEY.size:
                _, kind = _CONTROL_KEY.unpack_from(record.key)
                if kind in (CONTROL_ABORT, CONTROL_COMMIT):
                    contents.complete(header.producer_id, kind == CONTROL_COMMIT, record.offset)
        return
    transactional = header.producer_id if header.is_transactional else None
    for record in batch.records():
        if record.key is None:
            continue
        try:
            _apply_record(contents, record.key, record.value, record.offset, transactional)
        except (SeglogError, ValueError, struct.error) as exc:
            logger.error(
                "%s: skipping the record at offset %d: %s", OFFSETS_TOPIC, record.offset, exc
            )


def apply_consumer_group_record(
    contents: PartitionContents, key: bytes, value: bytes | None
) -> None:
    group_id = group_id_of_key(key)
    kind = key_type(key)
    by_group = (
        contents.share_groups if kind in SHARE_GROUP_RECORD_TYPES else contents.consumer_groups
    )
    held = by_group.setdefault(group_id, {})
    if value is None:
        held.pop(key, None)
        if not held:
            del by_group[group_id]
    else:
        held[key] = value


def _apply_record(
    contents: PartitionContents,
    key: bytes,
    value: bytes | None,
    record_offset: int,
    producer_id: int | None,
) -> None:
    if key_type(key) in CONSUMER_GROUP_RECORD_TYPES or key_type(key) in SHARE_GROUP_RECORD_TYPES:
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
        contents.drop_pending(group_id, (topic, partition))
        offsets = contents.offsets.get(group_id)
        if offsets is not None:
            offsets.pop((topic, partition), None)
            contents.record_offsets.pop((group_id, topic, partition), None)
            if not offsets:
                del contents.offsets[group_id]
        return
    entry = {(topic, partition): decode_offset_value(value)}
    if producer_id is None:
        contents.set_committed(group_id, entry, record_offset)
    else:
        contents.add_pending(producer_id, group_id, entry, record_offset)
