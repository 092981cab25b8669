"""Every share partition this gateway serves, made on first use: read back from
__share_group_state when it has a state there, else started at the partition's end
(share.auto.offset.reset=latest), its start (earliest) or the first offset at or after a
time (by_duration:<ISO 8601 duration> before now; the end when there is none) and that start
written at once, so a later "latest" never skips records that came after the first fetch.
The group's own configs (cluster/group_configs.py) win over the gateway's: its reset, and its
lock duration, delivery count limit and record locks, which a partition takes up on its
next use after they change."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator

from seglog.coordinator_errors import FencedStateEpochError
from seglog.errors import SeglogError, UnknownTopicOrPartitionError

from ..cluster.group_configs import EARLIEST, GroupConfig, duration_ms
from ..cluster.registry import Registry
from .archiving import persisted_batches, persisted_start_offset
from .settings import ShareSettings
from .share_partition import PartitionLimits, SharePartition
from .state_formats import ShareState, StateKey, topic_uuid
from .state_store import StateStore

logger = logging.getLogger(__name__)
PartitionId = tuple[str, str, int]  # (group, topic name, partition)
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1


class PartitionStates:
    def __init__(
        self,
        registry: Registry,
        store: StateStore,
        settings: ShareSettings,
        offset_of: Callable[[str, int, int], int],
        group_config: Callable[[str], GroupConfig] | None = None,
    ) -> None:
        """`offset_of(topic, partition, timestamp)`: the leader's offset for ListOffsets'
        timestamp -2 (log start), -1 (end) or a time in ms (-1: none at or after it);
        `group_config(group)`: the group's configs in force."""
        self.group_config = group_config
        self.registry = registry
        self.store = store
        self.settings = settings
        self.offset_of = offset_of
        self.limits = PartitionLimits(
            settings.group_share_record_lock_duration_ms / 1000,
            settings.group_share_delivery_count_limit,
            settings.group_share_partition_max_record_locks,
        )
        self._lock = threading.Lock()
        self._loading: dict[PartitionId, threading.Lock] = {}
        self._partitions: dict[PartitionId, SharePartition] = {}

    def key_of(self, pid: PartitionId) -> tuple[StateKey, str]:
        group, topic, partition = pid
        topic_id = self.registry.image.topic_id_of(topic)
        if not topic_id:
            raise UnknownTopicOrPartitionError(f"no topic {topic!r}")
        return StateKey(group, topic_uuid(topic_id), partition), topic_id

    def get(self, pid: PartitionId) -> SharePartition:
        found = self._partitions.get(pid)
        if found is not None:
            # A swap of the limits object (the group's configs changed): no lock needed.
            found.limits = self.limits_of(pid[0])
            return found
        with self._lock:
            loading = self._loading.setdefault(pid, threading.Lock())
        with loading:
            found = self._partitions.get(pid)
            if found is None:
                found = self._load(pid)
                self._partitions[pid] = found
        return found

    def limits_of(self, group_id: str) -> PartitionLimits:
        if self.group_config is None:
            return self.limits
        return _limits(self.group_config(group_id))

    def _reset(self, group_id: str) -> str:
        if self.group_config is None:
            return self.settings.share_auto_offset_reset
        return self.group_config(group_id).share_auto_offset_reset

    def _load(self, pid: PartitionId) -> SharePartition:
        key, topic_id = self.key_of(pid)
        state = self.store.read(key, topic_id)
        if state is not None:
            # Taken over (or read back again): claimed at the next state epoch, written at
            # once, so a previous holder still writing at the old epoch is fenced
            # (state_store.py).
            claimed = SharePartition.from_state(
                self.limits_of(pid[0]),
                state.start_offset,
                state.state_batches,
                state.state_epoch + 1,
            )
            self.persist(pid, claimed)
            return claimed
        reset = self._reset(pid[0])
        back_ms = duration_ms(reset)
        if back_ms is not None:
            start = self.offset_of(pid[1], pid[2], time.time_ns() // 1_000_000 - back_ms)
            if start < 0:  # no record that recent: the end, as Kafka's by_duration
                start = self.offset_of(pid[1], pid[2], LATEST_TIMESTAMP)
        else:
            timestamp = EARLIEST_TIMESTAMP if reset == EARLIEST else LATEST_TIMESTAMP
            start = self.offset_of(pid[1], pid[2], timestamp)
        # Started afresh after a deletion: past the tombstone's state epoch, which the
        # partition's leader holds its writer to.
        partition = SharePartition(self.limits_of(pid[0]), start, self._epoch_deleted(pid) + 1)
        self.persist(pid, partition)
        return partition

    def _epoch_deleted(self, pid: PartitionId) -> int:
        """The state epoch the share partition's state was deleted at (-1: never deleted)."""
        key, topic_id = self.key_of(pid)
        deleted = self.store.deleted_epoch(key, topic_id)
        return -1 if deleted is None else deleted

    def persist(self, pid: PartitionId, partition: SharePartition) -> None:
        """Write the partition's state (the caller holds its lock). FencedStateEpochError:
        another gateway holds it now; this one's copy is dropped (read back on next use)."""
        key, topic_id = self.key_of(pid)
        now_ms = time.time_ns() // 1_000_000
        try:
            self._write(key, topic_id, partition, now_ms)
        except FencedStateEpochError as exc:
            logger.warning("share partition %s: %s; dropping this gateway's copy", pid, exc)
            with self._lock:
                if self._partitions.get(pid) is partition:
                    del self._partitions[pid]
            raise

    def _write(self, key: StateKey, topic_id: str, partition: SharePartition, now_ms: int) -> None:
        self.store.write(
            key,
            topic_id,
            ShareState(
                snapshot_epoch=0,
                state_epoch=partition.state_epoch,
                leader_epoch=-1,
                start_offset=persisted_start_offset(partition),
                create_timestamp_ms=now_ms,
                write_timestamp_ms=now_ms,
                state_batches=tuple(persisted_batches(partition)),
            ),
        )

    def reset(self, pid: PartitionId, start_offset: int | None) -> None:
        """Start the share partition afresh at `start_offset` (its in-flight records dropped,
        its state epoch bumped, as Kafka's AlterShareGroupOffsets writes it), or delete its
        state (None). For groups without members (the caller checks): no fetch races it."""
        with self._lock:
            loading = self._loading.setdefault(pid, threading.Lock())
        with loading:
            before = self._partitions.get(pid)
            if before is None:
                key, topic_id = self.key_of(pid)
                state = self.store.read(key, topic_id)
                epoch = state.state_epoch if state is not None else self._epoch_deleted(pid)
            else:
                epoch = before.state_epoch
            if start_offset is None:
                key, topic_id = self.key_of(pid)
                self.store.delete(key, topic_id, epoch + 1)
                self._partitions.pop(pid, None)
                return
            partition = SharePartition(self.limits_of(pid[0]), start_offset, epoch + 1)
            self.persist(pid, partition)
            self._partitions[pid] = partition

    def forget_state_partition(self, state_partition: int) -> None:
        """Drop every share partition kept in __share_group_state partition
        `state_partition`, and the store's copy of it: the next use reads them back."""
        with self._lock:
            for pid in list(self._partitions):
                try:
                    key, topic_id = self.key_of(pid)
                except SeglogError:  # its topic is gone
                    self._partitions.pop(pid, None)
                    continue
                if self.store.partition_for(key, topic_id) == state_partition:
                    self._partitions.pop(pid, None)
        self.store.forget_partition(state_partition)

    def of_group(self, group_id: str) -> Iterator[tuple[PartitionId, SharePartition]]:
        for pid, partition in list(self._partitions.items()):
            if pid[0] == group_id:
                yield pid, partition

    def loaded(self) -> list[tuple[PartitionId, SharePartition]]:
        return list(self._partitions.items())


@functools.lru_cache(maxsize=1024)
def _limits(config: GroupConfig) -> PartitionLimits:
    """A group's partition limits, made once per set of its configs (configs are hashable)."""
    return PartitionLimits(
        config.share_record_lock_duration_ms / 1000,
        config.share_delivery_count_limit,
        config.share_partition_max_record_locks,
    )
