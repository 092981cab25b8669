"""The transaction coordinator's log: the compacted internal topic `__transaction_state`,
one record per transactional id (formats in log_formats.py), the newest winning. A state
change is appended with acks=all before it is acted on (answered, or its markers sent), so a
gateway that takes a partition over reads back every transaction's last state.

Reading back skips a batch that is corrupt or a record that does not decode (logged): one
bad record loses one id's state, not the partition's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import grpc

from seglog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    SeglogError,
)
from seglog.records import RecordBatch, RecordBatchBuilder
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.v1 import common_pb2

from ..cluster.registry import Registry
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
# Kafka's transaction.state.log.segment.bytes (100 MiB); compaction keeps the topic small.
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
_FETCH_BYTES = 8 * 1024 * 1024
_NODE_CALL_TIMEOUT_S = 30.0

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
        self.connections = connections
        self._create_topic = create_topic
        self.default_num_partitions = num_partitions
        self.write_timeout_ms = write_timeout_ms
        self._lock = threading.Lock()

    @property
    def num_partitions(self) -> int:
        topic = self.registry.topics.get(TRANSACTION_STATE_TOPIC)
        return len(topic.partitions) if topic is not None else self.default_num_partitions

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self.num_partitions)

    def ensure_topic(self) -> None:
        if TRANSACTION_STATE_TOPIC in self.registry.topics:
            return
        with self._lock:
            if TRANSACTION_STATE_TOPIC not in self.registry.topics:
                try:
                    self._create_topic(
                        TRANSACTION_STATE_TOPIC, self.default_num_partitions, dict(TOPIC_CONFIGS)
                    )
                except SeglogError as exc:
                    raise CoordinatorNotAvailableError(
                        f"cannot create {TRANSACTION_STATE_TOPIC}: {exc}"
                    ) from None

    def coordinator_epoch(self, partition: int) -> int:
        """Kafka's coordinator epoch: the leader epoch of the log partition."""
        try:
            return self.registry.route(TRANSACTION_STATE_TOPIC, partition).leader_epoch
        except SeglogError:
            return 0  # no leader now: the markers' coordinator epoch is advisory here

    def _leader(self, partition: int):  # type: ignore[no-untyped-def]
        try:
            route = self.registry.route(TRANSACTION_STATE_TOPIC, partition)
        except SeglogError as exc:
            # A log partition offline (no leader, its leader's disk failed) is the coordinator
            # unavailable, as Kafka answers a failed log write: a client retries that. The
            # partition's own error (LEADER_NOT_AVAILABLE, KAFKA_STORAGE_ERROR) on
            # AddPartitionsToTxn or EndTxn made librdkafka abort the transaction, and its
            # abort then met a coordinator that never started it: INVALID_TXN_STATE, fatal.
            raise CoordinatorNotAvailableError(
                f"{TRANSACTION_STATE_TOPIC}-{partition}: {exc}"
            ) from None
        if not route.live or route.address is None:
            raise CoordinatorNotAvailableError(
                f"{TRANSACTION_STATE_TOPIC}-{partition}: its node {route.leader} is not available"
            )
        return self.connections.get(route.leader, route.address)

    def append(self, transactional_id: str, value: TxnLogValue, empty_state: int = 0) -> None:
        """Write the id's new state; returns once every in-sync replica has it (acks=all)."""
        partition = self.partition_for(transactional_id)
        builder = RecordBatchBuilder()
        builder.append(
            encode_key(transactional_id),
            encode_value(value, empty_state=empty_state),
            time.time_ns() // 1_000_000,
        )
        request = common_pb2.ProduceRequest(
            topic=TRANSACTION_STATE_TOPIC, acks=-1, timeout_ms=self.write_timeout_ms
        )
        request.partitions.add(partition=partition, records=builder.build())
        try:
            response = self._leader(partition).stub.Append(request, timeout=_NODE_CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise CoordinatorNotAvailableError(
                f"writing {TRANSACTION_STATE_TOPIC} failed: {error_from_rpc(exc)}"
            ) from None
        result = response.partitions[0]
        if result.error:
            error = error_from_code(result.error, result.error_message)
            # Kafka's coordinator answers a failed log write as NOT_COORDINATOR (the client
            # looks the coordinator up again and retries); unavailable says the same here.
            raise CoordinatorNotAvailableError(f"writing {TRANSACTION_STATE_TOPIC}: {error}")

    def load(self, partition: int) -> Loaded:
        """Every transactional id's newest state in the partition, read from its start to its
        high watermark."""
        self.ensure_topic()
        stub = self._leader(partition).stub
        loaded: Loaded = {}
        try:
            earliest = stub.ListOffsets(
                common_pb2.ListOffsetsRequest(
                    partitions=[
                        common_pb2.ListOffsetsPartition(
                            topic=TRANSACTION_STATE_TOPIC, partition=partition, timestamp=-2
                        )
                    ]
                ),
                timeout=_NODE_CALL_TIMEOUT_S,
            ).partitions[0]
            if earliest.error:
                raise error_from_code(earliest.error, earliest.error_message)
            offset = earliest.offset
            for _ in range(1_000_000):  # bounded: each round moves forward or stops
                request = common_pb2.FetchRequest(
                    min_bytes=1, max_wait_ms=0, max_bytes=_FETCH_BYTES
                )
                request.partitions.add(
                    topic=TRANSACTION_STATE_TOPIC,
                    partition=partition,
                    fetch_offset=offset,
                    partition_max_bytes=_FETCH_BYTES,
                )
                started_at, high_watermark = offset, offset
                for message in stub.Fetch(request, timeout=_NODE_CALL_TIMEOUT_S):
                    if message.error:
                        raise error_from_code(message.error, message.error_message)
                    high_watermark = message.high_watermark
                    offset = max(offset, apply_batches(loaded, message.records))
                if offset >= high_watermark or offset == started_at:
                    break
        except grpc.RpcError as exc:
            raise CoordinatorLoadInProgressError(
                f"reading {TRANSACTION_STATE_TOPIC}-{partition} back: {error_from_rpc(exc)}"
            ) from None
        except SeglogError as exc:
            if exc.retriable:
                raise CoordinatorLoadInProgressError(
                    f"reading {TRANSACTION_STATE_TOPIC}-{partition} back: {exc}"
                ) from None
            raise
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
