"""Share partitions' state kept the way Kafka's share coordinator keeps it: records in the
compacted internal topic `__share_group_state` (formats in state_formats.py), one key per
(group, topic id, partition) in partition `abs(java_hash("group:topicId:partition")) %
share.coordinator.state.topic.num.partitions`, as Kafka's SharePartitionKey places it.

A state is written (acks=all) before the change it records is answered: an acknowledgement
a client was told succeeded is on every in-sync replica, and a gateway that starts again reads
each partition of the topic back (the newest record per key winning, ShareUpdates applied over
their snapshot) before it answers for any share partition in it, so nothing acknowledged is
delivered again and no delivery count goes back.

State epochs fence an old holder (Kafka's FENCED_STATE_EPOCH): a gateway that takes a share
partition over writes its state at once with the state epoch one past the stored one (a
claim, partition_states.py), and every record of a share partition is written as producer
`state_producer_id(key)` at producer epoch = its state epoch (capped at int16's 32767), with
no sequence. The partition's leader refuses a batch of that producer at an epoch older than
the last it appended (producer_state.py: INVALID_PRODUCER_EPOCH), so an old holder that
wakes up (paused, partitioned) cannot append over the new holder's state: its write fails
with FencedStateEpochError and it drops its copy. The check is the leader's, where the
writes meet, not the writer's own (stale) view. What the old holder wrote before the new
holder's claim was read back before the claim or lands in the window between that read and
the claim (milliseconds, while the old holder's coordination lease has lapsed already).

The store goes through the gateway's routing to the leaders (the same produce and fetch the
data path uses; state_access.py), never to a node's gRPC stub directly; internal_topics.py
makes the topic and reads its partitions back.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

from seglog.coordinator_errors import FencedStateEpochError
from seglog.errors import CoordinatorNotAvailableError, InvalidProducerEpochError, SeglogError
from seglog.records import RecordBatch, RecordBatchBuilder

from ..cluster.registry import Registry
from ..groups.offsets_formats import partition_for_group
from ..internal_topics import InternalTopic
from ..routing.fetch_routing import FetchRouting
from ..routing.leader_queries import LeaderQueries
from ..routing.produce_routing import ProduceRouting
from .batch_walk import batch_headers
from .state_access import RoutedAccess
from .state_formats import (
    SNAPSHOT_TYPE,
    ShareState,
    StateKey,
    apply_update,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
)

logger = logging.getLogger(__name__)

STATE_TOPIC = "__share_group_state"
WRITE_TIMEOUT_MS = 5000  # share.coordinator.write.timeout.ms
MAX_PRODUCER_EPOCH = 32767  # a batch's producer epoch is an int16
# The share state writers' producer ids: bit 62 set, far above any the cluster allocates
# (producer_ids.py counts up from 0), the low bits a digest of the share partition's key.
_STATE_PRODUCER_BASE = 1 << 62


def state_producer_id(key: StateKey) -> int:
    digest = hashlib.blake2b(encode_key(key), digest_size=8).digest()
    return _STATE_PRODUCER_BASE | (int.from_bytes(digest, "big") & (_STATE_PRODUCER_BASE - 1))


class StateStore:
    def __init__(
        self,
        registry: Registry,
        producing: ProduceRouting,
        fetching: FetchRouting,
        queries: LeaderQueries,
        create_topic: Callable[[str, int, dict[str, str]], None],
        num_partitions: int,
    ) -> None:
        self.registry = registry
        # Kafka's share.coordinator.state.topic.* defaults: compacted, 100 MiB segments.
        self.topic = InternalTopic(
            STATE_TOPIC,
            registry,
            RoutedAccess(producing, fetching, queries),
            create_topic,
            num_partitions=num_partitions,
        )
        self._lock = threading.Lock()
        self._partition_locks: dict[int, threading.Lock] = {}
        self._cache: dict[int, dict[StateKey, ShareState]] = {}
        # Per partition, each deleted share partition's state epoch at its deletion: the next
        # start of it goes on past that epoch (the leader refuses an older one from its writer).
        self._deleted: dict[int, dict[StateKey, int]] = {}
        self.writes = 0  # records written (a figure for metrics and tests)

    @property
    def num_partitions(self) -> int:
        return self.topic.num_partitions

    def partition_for(self, key: StateKey, topic_id: str) -> int:
        # Kafka's SharePartitionKey.asCoordinatorKey(): "groupId:topicId:partition", its
        # topic id in Uuid.toString's form (the registry's).
        return partition_for_group(
            f"{key.group_id}:{topic_id}:{key.partition}", self.num_partitions
        )

    def ensure_topic(self) -> None:
        self.topic.ensure()

    def _partition_lock(self, partition: int) -> threading.Lock:
        with self._lock:
            return self._partition_locks.setdefault(partition, threading.Lock())

    # -- reading back ---------------------------------------------------------------------

    def read(self, key: StateKey, topic_id: str) -> ShareState | None:
        return self._loaded(self.partition_for(key, topic_id)).get(key)

    def deleted_epoch(self, key: StateKey, topic_id: str) -> int | None:
        """The state epoch a deleted share partition's tombstone was written at (None: not
        deleted, or never written)."""
        partition = self.partition_for(key, topic_id)
        self._loaded(partition)
        return self._deleted.get(partition, {}).get(key)

    def _loaded(self, partition: int) -> dict[StateKey, ShareState]:
        self.ensure_topic()
        contents = self._cache.get(partition)
        if contents is not None:
            return contents
        with self._partition_lock(partition):
            contents = self._cache.get(partition)
            if contents is None:
                contents = self._load(partition)
                self._cache[partition] = contents
        return contents

    def _load(self, partition: int) -> dict[StateKey, ShareState]:
        """The partition from its start to its high watermark, replayed."""
        contents: dict[StateKey, ShareState] = {}
        deleted = self._deleted.setdefault(partition, {})
        deleted.clear()
        self.topic.read_back(partition, lambda records: _replay(contents, deleted, records))
        logger.info(
            "read back %d share partitions' state from %s-%d", len(contents), STATE_TOPIC, partition
        )
        return contents

    def forget_partition(self, partition: int) -> None:
        with self._partition_lock(partition):
            self._cache.pop(partition, None)

    # -- writing ----------------------------------------------------------------------------

    def write(self, key: StateKey, topic_id: str, state: ShareState) -> None:
        """Append the state as a ShareSnapshot, acks=all; the cache changes only once the
        leader has it. CoordinatorNotAvailableError when it could not be written."""
        partition = self.partition_for(key, topic_id)
        contents = self._loaded(partition)
        now_ms = time.time_ns() // 1_000_000
        builder = RecordBatchBuilder(
            producer_id=state_producer_id(key),
            producer_epoch=min(state.state_epoch, MAX_PRODUCER_EPOCH),
        )
        builder.append(encode_key(key, SNAPSHOT_TYPE), encode_snapshot(state), now_ms)
        with self._partition_lock(partition):
            try:
                self.topic.append(partition, builder.build(), WRITE_TIMEOUT_MS)
            except InvalidProducerEpochError as exc:
                contents.pop(key, None)  # stale: the next read of it goes to the log
                self._cache.pop(partition, None)
                raise FencedStateEpochError(
                    f"share partition {key.group_id}:{key.partition} of topic {topic_id}: "
                    f"state epoch {state.state_epoch} is fenced by a newer holder ({exc})"
                ) from None
            except SeglogError as exc:
                raise CoordinatorNotAvailableError(f"writing share state failed: {exc}") from None
            contents[key] = state
            self._deleted.get(partition, {}).pop(key, None)
            self.writes += 1

    def delete(self, key: StateKey, topic_id: str, state_epoch: int) -> None:
        """Append the share partition's tombstone (Kafka's DeleteShareGroupOffsets) at
        `state_epoch`, by the same writer as its snapshots: read back, it has no state, so its
        next use starts it by share.auto.offset.reset, at a state epoch past this one."""
        partition = self.partition_for(key, topic_id)
        contents = self._loaded(partition)
        builder = RecordBatchBuilder(
            producer_id=state_producer_id(key),
            producer_epoch=min(state_epoch, MAX_PRODUCER_EPOCH),
        )
        builder.append(encode_key(key, SNAPSHOT_TYPE), None, time.time_ns() // 1_000_000)
        with self._partition_lock(partition):
            try:
                self.topic.append(partition, builder.build(), WRITE_TIMEOUT_MS)
            except InvalidProducerEpochError as exc:
                contents.pop(key, None)
                self._cache.pop(partition, None)
                raise FencedStateEpochError(
                    f"share partition {key.group_id}:{key.partition} of topic {topic_id}: "
                    f"state epoch {state_epoch} is fenced by a newer holder ({exc})"
                ) from None
            except SeglogError as exc:
                raise CoordinatorNotAvailableError(f"deleting share state failed: {exc}") from None
            contents.pop(key, None)
            self._deleted.setdefault(partition, {})[key] = state_epoch
            self.writes += 1


def _replay(
    contents: dict[StateKey, ShareState], deleted: dict[StateKey, int], records: bytes
) -> int:
    """Apply every whole batch; the offset after the last one (-1: none). A corrupt record
    is logged and skipped, not fatal to the other share partitions of the partition."""
    next_offset = -1
    for pos, header in batch_headers(records):
        next_offset = max(next_offset, header.next_offset)
        if header.is_control:
            continue
        try:
            batch = RecordBatch(records, pos)
            batch.validate()
            for record in batch.records():
                if record.key is None:
                    continue
                record_type, key = decode_key(record.key)
                if record.value is None:
                    contents.pop(key, None)
                    deleted[key] = header.producer_epoch
                elif record_type == SNAPSHOT_TYPE:
                    contents[key] = decode_snapshot(record.value)
                elif key in contents:
                    start, batches = decode_update(record.value)
                    contents[key] = apply_update(contents[key], start, batches)
        except SeglogError as exc:
            logger.error(
                "%s: skipping a corrupt batch at offset %d: %s",
                STATE_TOPIC,
                header.base_offset,
                exc,
            )
    return next_offset
