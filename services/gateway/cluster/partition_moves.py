"""Moving partitions, as the broker core offers it to both protocols: AlterPartitionReassignments,
ListPartitionReassignments, ElectLeaders (the registry's decisions: cluster/reassignments.py)
and DescribeLogDirs (asked of each node). Typed requests in, typed answers out, SeglogErrors for
a whole request refused; authorization is checked here, explicitly, against the Caller.

- Altering needs Alter on the cluster, listing and describing log dirs Describe on it, as
  Kafka's broker has it. A request is checked whole and changes nothing when one partition is
  refused (the error names the culprit).
- A move's throttle: the one asked for, else (the Kafka tools' way) the replication throttles
  set as broker and topic configs (replication_throttles.py), from the move's leader and
  adding replicas.
- Log dirs: a node has one, and a node's answer lists each partition it holds with its size.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal

import grpc

from seglog.errors import InvalidReplicaAssignmentError, NodeUnavailableError, SeglogError
from seglog.rpc.status import error_from_rpc
from seglog.security.acls import CLUSTER_NAME
from seglog.v1 import common_pb2, storage_pb2

from ..authorization import Authorization
from ..broker.caller import Caller
from ..node_connections import NodeConnections
from .reassignments import PREFERRED, UNCLEAN
from .registry import Registry
from .replica_deletion import NODE_CALL_TIMEOUT_S, delete_replicas
from .replication_throttles import ReplicationThrottles

logger = logging.getLogger(__name__)

ElectionType = Literal["preferred", "unclean"]


@dataclass(frozen=True)
class ReplicaTarget:
    topic: str
    partition: int
    # The replicas wanted, preferred leader first; None cancels the partition's move.
    replicas: tuple[int, ...] | None


@dataclass(frozen=True)
class AlterReassignments:
    targets: tuple[ReplicaTarget, ...]
    # Bytes/s for each adding replica's catch-up; None: from the replication throttle configs.
    throttle_bytes_per_s: int | None = None
    validate_only: bool = False


@dataclass(frozen=True)
class OngoingReassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    throttle_bytes_per_s: int


@dataclass(frozen=True)
class ElectionResult:
    topic: str
    partition: int
    leader: int  # after the election; -1 when the partition is gone
    error: SeglogError | None


@dataclass(frozen=True)
class LogDirPartition:
    topic: str
    partition: int
    size_bytes: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True)
class NodeLogDir:
    node_id: int
    partitions: tuple[LogDirPartition, ...]
    error: SeglogError | None  # the node could not be asked (down, or its call failed)


Partitions = Sequence[tuple[str, int]]


class PartitionMoves:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        authorization: Authorization,
        throttles: ReplicationThrottles,
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.authorization = authorization
        self.throttles = throttles

    def _cluster(self, caller: Caller, operation: str, action: str) -> None:
        self.authorization.check(caller, [(operation, "cluster", CLUSTER_NAME)], action)

    def alter(self, caller: Caller, request: AlterReassignments) -> None:
        self._cluster(caller, "Alter", "AlterPartitionReassignments")
        targets: dict[tuple[str, int], list[int] | None] = {}
        for target in request.targets:
            tp = (target.topic, target.partition)
            if tp in targets:
                raise InvalidReplicaAssignmentError(
                    f"{target.topic}-{target.partition} is named twice in the request"
                )
            targets[tp] = None if target.replicas is None else list(target.replicas)
        if request.throttle_bytes_per_s is not None:
            throttle = request.throttle_bytes_per_s
        else:
            throttle = self._configured_throttle(targets)
        removed = self.registry.alter_reassignments(
            targets, throttle, validate_only=request.validate_only
        )
        delete_replicas(self.registry, self.connections, removed)

    def _configured_throttle(self, targets: dict[tuple[str, int], list[int] | None]) -> int:
        """The lowest rate the throttle configs give any of the moves (the registry holds one
        throttle per request); 0 when none is throttled."""
        current = {(t.name, i): p for t, i, p in self.registry.partitions_of(list(targets))}
        rates = []
        for tp, replicas in targets.items():
            assignment = current.get(tp)
            if replicas is None or assignment is None:
                continue
            adding = [r for r in replicas if r not in assignment.replicas]
            rate = self.throttles.rate_for(tp[0], tp[1], assignment.leader, adding)
            if rate:
                rates.append(rate)
        return min(rates) if rates else 0

    def ongoing(self, caller: Caller, wanted: Partitions | None) -> list[OngoingReassignment]:
        """The moves under way (of `wanted`, or all)."""
        self._cluster(caller, "Describe", "ListPartitionReassignments")
        return [
            OngoingReassignment(
                topic.name,
                i,
                tuple(p.replicas),
                tuple(p.adding),
                tuple(p.removing),
                tuple(p.isr),
                p.leader,
                p.throttle_bytes_per_s,
            )
            for topic, i, p in self.registry.reassignments(None if wanted is None else list(wanted))
        ]

    def elect(
        self, caller: Caller, kind: ElectionType, wanted: Partitions | None
    ) -> list[ElectionResult]:
        """Kafka's ElectLeaders over `wanted` (None: every partition that could use one)."""
        self._cluster(caller, "Alter", "ElectLeaders")
        results = self.registry.elect_leaders(
            UNCLEAN if kind == "unclean" else PREFERRED, None if wanted is None else list(wanted)
        )
        leaders = {(t.name, i): p.leader for t, i, p in self.registry.partitions_of(list(results))}
        return [
            ElectionResult(topic, i, leaders.get((topic, i), -1), error)
            for (topic, i), error in sorted(results.items())
        ]

    def describe_log_dirs(self, caller: Caller, node_ids: Sequence[int]) -> list[NodeLogDir]:
        """Each of `node_ids`' log dir (the registered nodes when empty), asked of the nodes
        at once; a node down or failing carries its error."""
        self._cluster(caller, "Describe", "DescribeLogDirs")
        addresses = self.registry.addresses()
        wanted = sorted(set(node_ids)) or sorted(addresses)
        calls: dict[int, Future[Any]] = {}
        for node_id in wanted:
            if node_id not in addresses or not self.registry.is_live(node_id):
                continue
            stub = self.connections.get(node_id, addresses[node_id]).stub
            calls[node_id] = stub.DescribePartitions.future(
                storage_pb2.DescribePartitionsRequest(), timeout=NODE_CALL_TIMEOUT_S
            )
        return [self._log_dir(node_id, calls.get(node_id)) for node_id in wanted]

    @staticmethod
    def _log_dir(node_id: int, call: Future[Any] | None) -> NodeLogDir:
        if call is None:
            error = NodeUnavailableError(f"node {node_id} is not registered or not live")
            return NodeLogDir(node_id, (), error)
        try:
            described = call.result()
        except grpc.RpcError as exc:
            return NodeLogDir(node_id, (), error_from_rpc(exc))
        partitions = tuple(
            LogDirPartition(
                s.topic, s.partition, s.size_bytes, s.log_start_offset, s.log_end_offset
            )
            for s in sorted(described.partitions, key=lambda s: (s.topic, s.partition))
            if s.error == common_pb2.NONE
        )
        return NodeLogDir(node_id, partitions, None)
