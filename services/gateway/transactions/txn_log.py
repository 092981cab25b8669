"""The transaction coordinator's log: the compacted internal topic `__transaction_state`,
one record per transactional id (formats in log_formats.py), the newest winning. A state
change is appended with acks=all before it is acted on (answered, or its markers sent), so a
gateway that takes a partition over reads back every transaction's last state.

Reading back skips a batch that is corrupt or a record that does not decode (logged): one
bad record loses one id's state, not the partition's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from seglog.errors import CoordinatorNotAvailableError, SeglogError
from seglog.records import RecordBatch, RecordBatchBuilder

from ..cluster.registry import Registry
from ..internal_topics import InternalTopic, NodeAccess
from ..node_connections import NodeConnections
from .log_formats import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for_transactional_id,
)

logger = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"

Loaded = dict[str, TxnLogValue | None]  # transactional id -> newest value (None: tombstone)


class TransactionLog:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        create_topic: Callable[[str, int, dict[str, str]], None],
        *,
        num_partitions: int,
        write_timeout_ms: int,
    ) -> None:
        self.registry = registry
        self.topic = InternalTopic(
            TRANSACTION_STATE_TOPIC,
            registry,
            NodeAccess(registry, connections),
            create_topic,
            num_partitions=num_partitions,
        )
        self.write_timeout_ms = write_timeout_ms

    @property
    def num_partitions(self) -> int:
        return self.topic.num_partitions

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self.num_partitions)

    def ensure_topic(self) -> None:
        self.topic.ensure()

    def coordinator_epoch(self, partition: int) -> int:
        """Kafka's coordinator epoch: the leader epoch of the log partition."""
        try:
            return self.registry.route(TRANSACTION_STATE_TOPIC, partition).leader_epoch
        except SeglogError:
            return 0  # no leader now: the markers' coordinator epoch is advisory here

    def append(
        self,
        transactional_id: str,
        value: TxnLogValue,
        empty_state: int = 0,
        then: TxnLogValue | None = None,
    ) -> None:
        """Write the id's new state (and `then`, the state after it, in the same batch: one
        replicated write for two changes); returns once every in-sync replica has it
        (acks=all)."""
        partition = self.partition_for(transactional_id)
        builder = RecordBatchBuilder()
        now_ms = time.time_ns() // 1_000_000
        key = encode_key(transactional_id)
        for state in (value, then):
            if state is not None:
                builder.append(key, encode_value(state, empty_state=empty_state), now_ms)
        try:
            self.topic.append(partition, builder.build(), self.write_timeout_ms)
        except SeglogError as exc:
            # Kafka's coordinator answers a failed log write as NOT_COORDINATOR (the client
            # looks the coordinator up again and retries); unavailable says the same here.
            raise CoordinatorNotAvailableError(
                f"writing {TRANSACTION_STATE_TOPIC}: {exc}"
            ) from None

    def load(self, partition: int) -> Loaded:
        """Every transactional id's newest state in the partition, read from its start to its
        high watermark."""
        self.ensure_topic()
        loaded: Loaded = {}
        self.topic.read_back(partition, lambda records: apply_batches(loaded, records))
        logger.info(
            "loaded %d transactional ids from %s-%d",
            len(loaded),
            TRANSACTION_STATE_TOPIC,
            partition,
        )
        return loaded


def apply_batches(loaded: Loaded, records: bytes) -> int:
    """Apply every whole batch; the offset after the last one (-1: none)."""
    pos, next_offset = 0, -1
    while pos < len(records):
        try:
            batch = RecordBatch(records, pos)
            batch.validate()
        except (SeglogError, ValueError, IndexError) as exc:
            logger.error("%s: a batch at byte %d is skipped: %s", TRANSACTION_STATE_TOPIC, pos, exc)
            break
        for record in batch:
            try:
                transactional_id = decode_key(bytes(record.key or b""))
                loaded[transactional_id] = (
                    None if record.value is None else decode_value(bytes(record.value))
                )
            except (SeglogError, ValueError) as exc:
                logger.error("%s: a record is skipped: %s", TRANSACTION_STATE_TOPIC, exc)
        next_offset = batch.header.next_offset
        pos += batch.size_in_bytes
    return next_offset
