"""Kafka's DescribeProducers in the broker core: each partition's idempotent producers
(producer id, epoch, last sequence, last timestamp) as its leader's producer state holds them,
asked of the leaders' nodes, one call per node, all in flight together.

Read on the topic is needed, as Kafka's broker asks (TOPIC_AUTHORIZATION_FAILED for that
topic's partitions, the others answered). A partition that cannot be routed, or whose node
fails or no longer leads it, gets its own error; the rest are answered. seglog has no
transactions: a producer's coordinator epoch and current transaction start offset are -1,
as Kafka shows them for a producer outside any transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from seglog.errors import NodeUnavailableError, PermissionDeniedError, SeglogError
from seglog.rpc.status import error_from_code
from seglog.v1 import storage_pb2

if TYPE_CHECKING:
    from ..authorization import Authorization
    from ..broker.caller import Caller
    from ..cluster.registry import Registry
    from ..node_connections import NodeConnections

NODE_CALL_TIMEOUT_S = 10.0
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    epoch: int
    last_sequence: int  # -1: none
    last_timestamp_ms: int  # -1: none
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


@dataclass(frozen=True)
class PartitionProducers:
    producers: tuple[ProducerState, ...] = ()
    error: SeglogError | None = None


class ProducerStates:
    def __init__(
        self, registry: Registry, connections: NodeConnections, authorization: Authorization
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.authorization = authorization

    def describe(
        self, caller: Caller, wanted: Mapping[str, Sequence[int]]
    ) -> dict[TopicPartition, PartitionProducers]:
        """An answer for every (topic, partition) asked."""
        answers: dict[TopicPartition, PartitionProducers] = {}
        by_node: dict[tuple[int, str], list[TopicPartition]] = {}
        for topic, partitions in wanted.items():
            try:
                self.authorization.check(caller, [("Read", "topic", topic)], "DescribeProducers")
            except PermissionDeniedError as exc:
                answers.update({(topic, p): PartitionProducers(error=exc) for p in partitions})
                continue
            for partition in partitions:
                try:
                    route = self.registry.route(topic, partition)
                    if route.address is None or not route.live:
                        raise NodeUnavailableError(
                            f"{topic}-{partition}: its leader, node {route.leader}, is not live"
                        )
                except SeglogError as exc:
                    answers[(topic, partition)] = PartitionProducers(error=exc)
                    continue
                by_node.setdefault((route.leader, route.address), []).append((topic, partition))
        calls = {
            node: self.connections.get(*node).stub.DescribeProducers.future(
                storage_pb2.DescribeProducersRequest(
                    partitions=[
                        storage_pb2.HostedPartitionRef(topic=t, partition=p) for t, p in tps
                    ]
                ),
                timeout=NODE_CALL_TIMEOUT_S,
            )
            for node, tps in by_node.items()
        }
        for node, call in calls.items():
            try:
                answer = call.result()
            except grpc.RpcError as exc:
                failed = NodeUnavailableError(f"node {node[0]} did not answer: {exc.code().name}")
                answers.update({tp: PartitionProducers(error=failed) for tp in by_node[node]})
                continue
            for part in answer.partitions:
                answers[(part.topic, part.partition)] = _partition(part)
        for tps in by_node.values():  # a node that left one out: never unanswered
            for tp in tps:
                answers.setdefault(
                    tp, PartitionProducers(error=NodeUnavailableError("no answer from its node"))
                )
        return answers


def _partition(part: storage_pb2.PartitionProducers) -> PartitionProducers:
    if part.error:
        return PartitionProducers(error=error_from_code(part.error, part.error_message))
    return PartitionProducers(
        tuple(
            ProducerState(
                p.producer_id,
                p.producer_epoch,
                p.last_sequence,
                p.last_timestamp_ms,
                p.coordinator_epoch,
                p.current_txn_start_offset,
            )
            for p in part.producers
        )
    )
