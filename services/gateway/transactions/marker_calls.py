"""WriteTxnMarkers asked by a client (Kafka's API 27, which `kafka-transactions abort` sends
to a partition's leader to end a hanging transaction): each marker written at once on its
partitions' leaders through the node RPC, one call per leader, and each partition's outcome
answered (no retrying: the admin client retries). ClusterAction on the cluster, as Kafka's
broker checks: only operators and brokers write markers."""

from __future__ import annotations

import grpc

from seglog.errors import (
    LeaderNotAvailableError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.v1 import common_pb2

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from ..cluster.registry import Registry
from ..node_connections import NodeConnections
from .log_formats import TopicPartition
from .marker_sends import Completion, marker_request

Outcomes = dict[TopicPartition, SeglogError | None]
_RPC_SLACK_S = 5.0


class MarkerCalls:
    def __init__(
        self, registry: Registry, connections: NodeConnections, authorization: Authorization
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.authorization = authorization

    def write(self, caller: Caller, markers: list[Completion], timeout_ms: int) -> list[Outcomes]:
        """Each marker's outcome per partition (None: written), in the request's order."""
        self.authorization.check(caller, [("ClusterAction", *CLUSTER)], "WriteTxnMarkers")
        return [self._write_one(marker, timeout_ms) for marker in markers]

    def _write_one(self, marker: Completion, timeout_ms: int) -> Outcomes:
        outcomes: Outcomes = {}
        by_leader: dict[tuple[int, str], list[TopicPartition]] = {}
        for topic, partition in sorted(marker.partitions):
            found = self.registry.topics.get(topic)
            if found is None or not 0 <= partition < len(found.partitions):
                outcomes[(topic, partition)] = UnknownTopicOrPartitionError(
                    f"{topic}-{partition} does not exist"
                )
                continue
            try:
                route = self.registry.route(topic, partition)
            except SeglogError as exc:
                outcomes[(topic, partition)] = exc
                continue
            if not route.live or route.address is None:
                outcomes[(topic, partition)] = LeaderNotAvailableError(
                    f"{topic}-{partition}: its leader {route.leader} is not live"
                )
                continue
            by_leader.setdefault((route.leader, route.address), []).append((topic, partition))
        calls = []
        for (node, address), partitions in by_leader.items():
            request = marker_request(marker, partitions)
            request.timeout_ms = timeout_ms
            stub = self.connections.get(node, address).stub
            future = stub.WriteTxnMarkers.future(request, timeout=timeout_ms / 1000 + _RPC_SLACK_S)
            calls.append((partitions, future))
        for partitions, future in calls:
            try:
                response = future.result()
            except grpc.RpcError as exc:
                error = error_from_rpc(exc)
                outcomes.update({tp: error for tp in partitions})
                continue
            answered = {
                (r.topic, r.partition): r
                for r in (response.markers[0].partitions if response.markers else [])
            }
            for tp in partitions:
                result = answered.get(tp)
                if result is None:
                    outcomes[tp] = SeglogError(f"{tp[0]}-{tp[1]}: the leader did not answer it")
                elif result.error == common_pb2.NONE:
                    outcomes[tp] = None
                else:
                    outcomes[tp] = error_from_code(result.error, result.error_message)
        return outcomes
