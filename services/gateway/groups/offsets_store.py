"""Committed offsets and group metadata, kept the way Kafka keeps them: records in the
compacted internal topic `__consumer_offsets` (formats in offsets_formats.py), one per
(group, topic, partition) and one per group, the newest winning. Compaction keeps the topic
small; a gateway that restarts reads each partition of it back before answering for the
groups it holds. A group's records live in partition `abs(java_hash(group_id)) % partitions`,
as in Kafka.

Reading back (offsets_reading.py, offsets_contents.py) survives damage: a corrupt batch or
record is logged and skipped instead of failing every group of the partition.

Committed offsets expire as Kafka's do (KIP-211) after `offsets.retention.minutes`: those of
a group with members never; of an empty consumer group counted from when it became empty
(its GroupMetadata record's currentStateTimestamp); of a group that never had members
(offsets committed by assign() users) from each offset's commit time. Expired offsets are
deleted with tombstones, and an empty group left with no offsets loses its metadata too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from seglog.errors import GroupIdNotFoundError
from seglog.records import RecordBatchBuilder

from ..cluster.registry import Registry
from ..internal_topics import InternalTopic, NodeAccess
from ..node_connections import NodeConnections
from .offsets_contents import (
    OFFSETS_TOPIC,
    GroupOffsets,
    PartitionContents,
    apply_consumer_group_record,
)
from .offsets_formats import (
    CONSUMER_PROTOCOL_TYPE,
    CommittedOffset,
    GroupMetadata,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for_group,
)
from .offsets_reading import read_on, read_partition

logger = logging.getLogger(__name__)

OFFSETS_COMMIT_TIMEOUT_MS = 5000  # Kafka's offsets.commit.timeout.ms

# Kafka's offsets.retention.minutes (7 days) and offsets.retention.check.interval.ms.
DEFAULT_OFFSETS_RETENTION_MINUTES = 7 * 24 * 60
DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000
DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions


# -- the store -------------------------------------------------------------------------------


class OffsetsStore:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        create_topic: Callable[[str, int, dict[str, str]], None],
        *,
        num_partitions: int = DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
    ) -> None:
        self.registry = registry
        self.topic = InternalTopic(
            OFFSETS_TOPIC,
            registry,
            NodeAccess(registry, connections),
            create_topic,
            num_partitions=num_partitions,
        )
        self._lock = threading.Lock()
        self._partition_locks: dict[int, threading.Lock] = {}
        self._cache: dict[int, PartitionContents] = {}

    @property
    def num_partitions(self) -> int:
        return self.topic.num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.num_partitions)

    def ensure_topic(self) -> None:
        """__consumer_offsets made if it is not yet (also on a group's first FindCoordinator,
        as Kafka's broker makes it: clients may wait to see it in Metadata)."""
        self.topic.ensure()

    def _partition_lock(self, partition: int) -> threading.Lock:
        with self._lock:
            return self._partition_locks.setdefault(partition, threading.Lock())

    # -- reading back --------------------------------------------------------------------------

    def _loaded(self, partition: int) -> PartitionContents:
        self.ensure_topic()
        contents = self._cache.get(partition)
        if contents is not None:
            return contents
        with self._partition_lock(partition):
            contents = self._cache.get(partition)
            if contents is None:
                contents = read_partition(self.topic, partition)
                self._cache[partition] = contents
        return contents

    def catch_up(self, partition: int) -> PartitionContents:
        """The partition's contents with what others appended since it was read (the COMMIT
        and ABORT markers a transaction coordinator had the node write) applied, in log
        order, from where reading stopped; what this store wrote itself is applied again,
        which leaves the same state (the newest record per key wins, in log order)."""
        contents = self._loaded(partition)
        with self._partition_lock(partition):
            read_on(self.topic, contents, partition, contents.next_offset)
        return contents

    def loaded(self, partition: int) -> PartitionContents:
        return self._loaded(partition)

    def cached(self, partition: int) -> PartitionContents | None:
        """The partition's contents if this store has read it, else None (nothing read)."""
        return self._cache.get(partition)

    def partition_lock(self, partition: int) -> threading.Lock:
        return self._partition_lock(partition)

    def committed(self, group_id: str) -> GroupOffsets:
        return dict(self._loaded(self.partition_for(group_id)).offsets.get(group_id, {}))

    def group_metadata(self, group_id: str) -> GroupMetadata | None:
        return self._loaded(self.partition_for(group_id)).groups.get(group_id)

    def consumer_group_records(self, group_id: str) -> dict[bytes, bytes]:
        """A KIP-848 group's records (key -> newest value), to replay it."""
        held = self._loaded(self.partition_for(group_id)).consumer_groups.get(group_id, {})
        return dict(held)

    def share_group_records(self, group_id: str) -> dict[bytes, bytes]:
        """A share group's records (key -> newest value), to replay it (share/)."""
        held = self._loaded(self.partition_for(group_id)).share_groups.get(group_id, {})
        return dict(held)

    def group_ids(self, partitions: Iterable[int] | None = None) -> set[str]:
        """Every group with committed offsets or consumer group records in these partitions
        (default all), reading back each one not yet loaded."""
        self.ensure_topic()
        found: set[str] = set()
        for partition in range(self.num_partitions) if partitions is None else partitions:
            contents = self._loaded(partition)
            found.update(contents.offsets)
            found.update(contents.consumer_groups)
        return found

    def forget_partition(self, partition: int) -> None:
        """Drop what was read of a partition: another gateway may write it from now on (or
        did until now), so the next use reads it back whole."""
        with self._partition_lock(partition):
            self._cache.pop(partition, None)

    def loaded_offsets(self) -> dict[str, GroupOffsets]:
        """The committed offsets of every group in the partitions this gateway has loaded
        (its groups), without creating the topic or reading anything back: what a metrics
        export reads."""
        out: dict[str, GroupOffsets] = {}
        for contents in list(self._cache.values()):
            for group_id, offsets in list(contents.offsets.items()):
                out[group_id] = dict(offsets)
        return out

    # -- writing -------------------------------------------------------------------------------

    def commit(self, group_id: str, offsets: Iterable[tuple[str, int, int, int, str]]) -> None:
        """Append one batch with a record per (topic, partition, offset, epoch, metadata);
        the cache changes only once the leader has written it."""
        partition = self.partition_for(group_id)
        contents = self._loaded(partition)
        now_ms = time.time_ns() // 1_000_000
        builder = RecordBatchBuilder()
        entries: GroupOffsets = {}
        for topic, topic_partition, offset, leader_epoch, metadata in offsets:
            builder.append(
                encode_offset_key(group_id, topic, topic_partition),
                encode_offset_value(offset, leader_epoch, metadata, now_ms),
                now_ms,
            )
            entries[(topic, topic_partition)] = CommittedOffset(
                offset, leader_epoch, metadata, now_ms
            )
        if not entries:
            return
        with self._partition_lock(partition):
            at = self._append(partition, builder.build())
            contents.set_committed(group_id, entries, at)

    def store_group(self, group_id: str, group: GroupMetadata) -> None:
        """Write a group's GroupMetadata record (Kafka's key type 2): its generation, protocol
        and members, after each rebalance and when it becomes empty."""
        partition = self.partition_for(group_id)
        contents = self._loaded(partition)
        now_ms = time.time_ns() // 1_000_000
        builder = RecordBatchBuilder()
        builder.append(encode_group_key(group_id), encode_group_value(group), now_ms)
        with self._partition_lock(partition):
            self._append(partition, builder.build())
            contents.groups[group_id] = group

    def store_consumer_group(
        self, group_id: str, records: list[tuple[bytes, bytes | None]]
    ) -> None:
        """Append a KIP-848 group's records in one batch (acks=all), in order."""
        partition = self.partition_for(group_id)
        contents = self._loaded(partition)
        now_ms = time.time_ns() // 1_000_000
        builder = RecordBatchBuilder()
        for key, value in records:
            builder.append(key, value, now_ms)
        with self._partition_lock(partition):
            self._append(partition, builder.build())
            for key, value in records:
                apply_consumer_group_record(contents, key, value)

    def expire_offsets(self, now_ms: int, retention_ms: int, active_groups: set[str]) -> int:
        """Delete the committed offsets past retention in the loaded partitions; return how
        many went. `active_groups` have members now, and keep theirs."""
        expired_count = 0
        for partition, contents in list(self._cache.items()):
            for group_id, offsets in list(contents.offsets.items()):
                if group_id in active_groups:
                    continue
                meta = contents.groups.get(group_id)
                empty_since = (
                    meta.current_state_timestamp_ms
                    if meta is not None
                    and meta.protocol_type == CONSUMER_PROTOCOL_TYPE
                    and not meta.members
                    and meta.current_state_timestamp_ms >= 0
                    else None
                )
                # Kafka keeps an offset a transaction is about to replace (it would come back
                # at the commit with nothing before it).
                pending = contents.pending_partitions(group_id) if contents.pending else set()
                expired = [
                    tp
                    for tp, c in offsets.items()
                    if now_ms - (c.commit_timestamp_ms if empty_since is None else empty_since)
                    >= retention_ms
                    and tp not in pending
                ]
                if expired:
                    drop_group = len(expired) == len(offsets) and meta is not None
                    self._delete(partition, contents, group_id, expired, drop_group, now_ms)
                    expired_count += len(expired)
        return expired_count

    def delete_group(self, group_id: str) -> int:
        """Delete a group's committed offsets and its metadata record (tombstones); returns
        how many offsets went. GROUP_ID_NOT_FOUND when it has neither."""
        partition = self.partition_for(group_id)
        contents = self._loaded(partition)
        # Transactions' pending offsets go too (Kafka tombstones them with the group's).
        pending = contents.pending_partitions(group_id) if contents.pending else set()
        offsets = sorted(set(contents.offsets.get(group_id, {})) | pending)
        if not offsets and group_id not in contents.groups:
            raise GroupIdNotFoundError(f"group {group_id!r} has no offsets or metadata")
        now_ms = time.time_ns() // 1_000_000
        self._delete(partition, contents, group_id, offsets, True, now_ms, "deleted")
        return len(offsets)

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> int:
        partition = self.partition_for(group_id)
        contents = self._loaded(partition)
        held = contents.offsets.get(group_id, {})
        doomed = [tp for tp in partitions if tp in held]
        if doomed:
            now_ms = time.time_ns() // 1_000_000
            self._delete(partition, contents, group_id, doomed, False, now_ms, "deleted")
        return len(doomed)

    def delete_topic_offsets(self, topic: str) -> int:
        """Delete every group's committed offsets for `topic` (it was deleted), as Kafka's
        coordinator does, so a topic created again under the name is not read from offsets
        that belonged to the old one; returns how many went."""
        if OFFSETS_TOPIC not in self.registry.topics:
            return 0  # no group ever committed: nothing to delete (and nothing to create)
        self.group_ids()  # every partition read back
        deleted = 0
        now_ms = time.time_ns() // 1_000_000
        for partition, contents in list(self._cache.items()):
            for group_id, offsets in list(contents.offsets.items()):
                doomed = [tp for tp in offsets if tp[0] == topic]
                if doomed:
                    self._delete(partition, contents, group_id, doomed, False, now_ms, "deleted")
                    deleted += len(doomed)
        return deleted

    def _delete(
        self,
        partition: int,
        contents: PartitionContents,
        group_id: str,
        expired: list[tuple[str, int]],
        drop_group: bool,
        now_ms: int,
        why: str = "expired",
    ) -> None:
        builder = RecordBatchBuilder()
        for topic, topic_partition in expired:
            builder.append(encode_offset_key(group_id, topic, topic_partition), None, now_ms)
        if drop_group:
            builder.append(encode_group_key(group_id), None, now_ms)
        with self._partition_lock(partition):
            self._append(partition, builder.build())
            offsets = contents.offsets.get(group_id, {})
            for tp in expired:
                offsets.pop(tp, None)
                contents.drop_pending(group_id, tp)
            if not offsets:
                contents.offsets.pop(group_id, None)
            if drop_group:
                contents.groups.pop(group_id, None)
        logger.info(
            "%s %d committed offsets of group %s%s",
            why,
            len(expired),
            group_id,
            " and its metadata" if drop_group else "",
        )

    def append(self, partition: int, records: bytes) -> int:
        """Append a batch (the caller holds the partition's lock); its base offset."""
        return self._append(partition, records)

    def _append(self, partition: int, records: bytes) -> int:
        # acks=all, as Kafka's coordinator writes: a commit acknowledged is on every in-sync
        # replica, and reading back (below the high watermark) finds it.
        result = self.topic.append(partition, records, OFFSETS_COMMIT_TIMEOUT_MS)
        contents = self._cache.get(partition)
        # Reading the tail goes on past this batch only if nothing came before it unread.
        if contents is not None and result.base_offset == contents.next_offset:
            contents.next_offset = result.last_offset + 1
        return result.base_offset
