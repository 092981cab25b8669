"""The plumbing of the internal topics the coordinators keep their state in
(`__consumer_offsets`, `__share_group_state`, `__transaction_state`), in one place: a topic made
when first needed, a partition read back from its leader's log start (or from where reading
stopped) to its high watermark, and a batch appended with acks=all.

What the records mean stays with each owner: `read_back` hands every fetched piece to the
owner's `apply`, which applies the whole batches in it and answers the offset after the last
one (-1: none). Reading stops at the high watermark, or where a round moved nothing (a batch
the owner could not apply): the owner then serves what was read before it, logged, rather
than failing every key of the partition.

How a partition's leader is reached is a `PartitionAccess`: `NodeAccess` calls the leading
node's gRPC service straight (the offsets and transaction logs); the share store reaches it
through the data plane's routing instead (share/state_access.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import grpc

from seglog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    SeglogError,
)
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.v1 import common_pb2

from .cluster.registry import Registry
from .node_connections import NodeConnections

logger = logging.getLogger(__name__)

# Kafka's internal topics are compacted with 100 MiB segments (offsets.topic.segment.bytes,
# transaction.state.log.segment.bytes, share.coordinator.state.topic.segment.bytes).
COMPACTED_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
READ_FETCH_BYTES = 8 * 1024 * 1024
NODE_CALL_TIMEOUT_S = 30.0
# A partition of 800 GB at 8 MiB a round: bounded all the same.
MAX_READ_ROUNDS = 100_000

CreateTopic = Callable[[str, int, dict[str, str]], None]
ApplyPiece = Callable[[bytes], int]  # a piece's records -> the offset after its last batch


@dataclass(frozen=True)
class FetchedPiece:
    high_watermark: int
    records: bytes


@dataclass(frozen=True)
class Appended:
    base_offset: int
    last_offset: int


class PartitionAccess(Protocol):
    """A partition leader's log, as the internal topics use it. Each call raises the
    SeglogError the leader answered; a failed call (transport, deadline) is a retriable
    CoordinatorNotAvailableError."""

    def log_start(self, topic: str, partition: int) -> int: ...

    def fetch(self, topic: str, partition: int, offset: int) -> Iterator[FetchedPiece]: ...

    def append(self, topic: str, partition: int, records: bytes, timeout_ms: int) -> Appended: ...


class NodeAccess:
    """The leading storage node's gRPC service, called straight."""

    def __init__(self, registry: Registry, connections: NodeConnections) -> None:
        self.registry = registry
        self.connections = connections

    def _stub(self, topic: str, partition: int):  # type: ignore[no-untyped-def]
        route = self.registry.route(topic, partition)
        if not route.live or route.address is None:
            raise CoordinatorNotAvailableError(
                f"{topic}-{partition}: its node {route.leader} is not available"
            )
        return self.connections.get(route.leader, route.address).stub

    def log_start(self, topic: str, partition: int) -> int:
        request = common_pb2.ListOffsetsRequest(
            partitions=[
                common_pb2.ListOffsetsPartition(topic=topic, partition=partition, timestamp=-2)
            ]
        )
        try:
            answer = (
                self._stub(topic, partition)
                .ListOffsets(request, timeout=NODE_CALL_TIMEOUT_S)
                .partitions[0]
            )
        except grpc.RpcError as exc:
            raise _call_failed(topic, partition, exc) from None
        if answer.error:
            raise error_from_code(answer.error, answer.error_message)
        return int(answer.offset)

    def fetch(self, topic: str, partition: int, offset: int) -> Iterator[FetchedPiece]:
        request = common_pb2.FetchRequest(min_bytes=1, max_wait_ms=0, max_bytes=READ_FETCH_BYTES)
        request.partitions.add(
            topic=topic,
            partition=partition,
            fetch_offset=offset,
            partition_max_bytes=READ_FETCH_BYTES,
        )
        try:
            for message in self._stub(topic, partition).Fetch(request, timeout=NODE_CALL_TIMEOUT_S):
                if message.error:
                    raise error_from_code(message.error, message.error_message)
                yield FetchedPiece(message.high_watermark, message.records)
        except grpc.RpcError as exc:
            raise _call_failed(topic, partition, exc) from None

    def append(self, topic: str, partition: int, records: bytes, timeout_ms: int) -> Appended:
        request = common_pb2.ProduceRequest(topic=topic, acks=-1, timeout_ms=timeout_ms)
        request.partitions.add(partition=partition, records=records)
        try:
            response = self._stub(topic, partition).Append(request, timeout=NODE_CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise _call_failed(topic, partition, exc) from None
        result = response.partitions[0]
        if result.error:
            raise error_from_code(result.error, result.error_message)
        return Appended(int(result.base_offset), int(result.last_offset))


def _call_failed(topic: str, partition: int, exc: grpc.RpcError) -> SeglogError:
    return CoordinatorNotAvailableError(f"{topic}-{partition}: {error_from_rpc(exc)}")


class InternalTopic:
    """One internal topic: its partition count, made when first needed, read and written."""

    def __init__(
        self,
        name: str,
        registry: Registry,
        access: PartitionAccess,
        create_topic: CreateTopic,
        *,
        num_partitions: int,
        configs: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.registry = registry
        self.access = access
        self._create_topic = create_topic
        self.default_num_partitions = num_partitions
        self.configs = dict(COMPACTED_TOPIC_CONFIGS if configs is None else configs)
        self._lock = threading.Lock()

    @property
    def num_partitions(self) -> int:
        """The topic's partitions once it exists; until then, how many it will be made with."""
        topic = self.registry.topics.get(self.name)
        return len(topic.partitions) if topic is not None else self.default_num_partitions

    def ensure(self) -> None:
        """Make the topic if it is not yet; CoordinatorNotAvailableError when it cannot be."""
        if self.name in self.registry.topics:
            return
        with self._lock:
            if self.name not in self.registry.topics:
                try:
                    self._create_topic(self.name, self.default_num_partitions, dict(self.configs))
                except SeglogError as exc:
                    raise CoordinatorNotAvailableError(
                        f"cannot create {self.name}: {exc}"
                    ) from None

    def read_back(self, partition: int, apply: ApplyPiece, from_offset: int | None = None) -> int:
        """Hand `apply` the partition's records from `from_offset` (default: its log start)
        to its high watermark; the offset reading stopped at. A retriable failure is
        CoordinatorLoadInProgressError (the client asks again)."""
        try:
            offset = (
                self.access.log_start(self.name, partition) if from_offset is None else from_offset
            )
            for _ in range(MAX_READ_ROUNDS):
                started_at, high_watermark = offset, offset
                for piece in self.access.fetch(self.name, partition, offset):
                    high_watermark = piece.high_watermark
                    offset = max(offset, apply(piece.records))
                if offset >= high_watermark:
                    break
                if offset == started_at:
                    logger.error(
                        "%s-%d: cannot read past offset %d (high watermark %d); serving what "
                        "was read before it",
                        self.name,
                        partition,
                        offset,
                        high_watermark,
                    )
                    break
        except SeglogError as exc:
            if exc.retriable:
                raise CoordinatorLoadInProgressError(
                    f"reading {self.name}-{partition} back failed: {exc}"
                ) from None
            raise
        return offset

    def append(self, partition: int, records: bytes, timeout_ms: int) -> Appended:
        """Append one batch with acks=all (on every in-sync replica when this returns, so
        reading back below the high watermark finds it). Raises the leader's error; a
        retriable one as CoordinatorNotAvailableError, which Kafka's clients answer by
        looking the coordinator up again."""
        try:
            return self.access.append(self.name, partition, records, timeout_ms)
        except SeglogError as exc:
            if exc.retriable:
                raise CoordinatorNotAvailableError(f"writing {self.name} failed: {exc}") from None
            raise
