"""Admin's calls for moving partitions (mixed into `Admin`): Kafka's
alterPartitionReassignments, listPartitionReassignments, electLeaders and describeLogDirs,
and decommissioning a node (no new replicas on it) or recommissioning it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import SeglogError
from ..rpc.status import error_from_code
from ..v1 import gateway_pb2
from .gateway import GatewayClient
from .structs import TopicPartition

PREFERRED = "preferred"
UNCLEAN = "unclean"


@dataclass(frozen=True)
class PartitionReassignment:
    """A move under way (Kafka's PartitionReassignment): all replicas now (the target then
    those being removed), the ones being added and removed, the ISR and leader."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    throttle_bytes_per_s: int

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)


@dataclass(frozen=True)
class ReplicaLogDir:
    """One partition's log on one node (Kafka's ReplicaInfo)."""

    size_bytes: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True)
class ElectionResult:
    leader: int
    error: SeglogError | None


class ReassignmentAdmin:
    _client: GatewayClient

    def alter_partition_reassignments(
        self,
        targets: Mapping[TopicPartition, Sequence[int] | None],
        *,
        throttle_bytes_per_s: int = 0,
        validate_only: bool = False,
    ) -> None:
        """Move each partition to its target replicas (None: cancel its move). The whole
        request is checked before anything changes; the first problem is raised."""
        request = gateway_pb2.AlterPartitionReassignmentsRequest(
            throttle_bytes_per_s=throttle_bytes_per_s, validate_only=validate_only
        )
        for tp, replicas in targets.items():
            request.partitions.add(
                topic=tp.topic,
                partition=tp.partition,
                replicas=list(replicas or ()),
                cancel=replicas is None,
            )
        self._client.call("AlterPartitionReassignments", request)

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] = ()
    ) -> dict[TopicPartition, PartitionReassignment]:
        request = gateway_pb2.ListPartitionReassignmentsRequest()
        for tp in partitions:
            request.partitions.add(topic=tp.topic, partition=tp.partition)
        response = self._client.call("ListPartitionReassignments", request)
        return {
            TopicPartition(r.topic, r.partition): PartitionReassignment(
                tuple(r.replicas),
                tuple(r.adding_replicas),
                tuple(r.removing_replicas),
                tuple(r.isr),
                r.leader,
                r.throttle_bytes_per_s,
            )
            for r in response.reassignments  # type: ignore[attr-defined]
        }

    def elect_leaders(
        self, election_type: str = PREFERRED, partitions: Iterable[TopicPartition] = ()
    ) -> dict[TopicPartition, ElectionResult]:
        """Kafka's electLeaders; no partitions: every one that could use an election."""
        if election_type not in (PREFERRED, UNCLEAN):
            raise ValueError(f"election type {election_type!r}: preferred or unclean")
        request = gateway_pb2.ElectLeadersRequest(
            election_type=gateway_pb2.UNCLEAN if election_type == UNCLEAN else gateway_pb2.PREFERRED
        )
        for tp in partitions:
            request.partitions.add(topic=tp.topic, partition=tp.partition)
        response = self._client.call("ElectLeaders", request)
        return {
            TopicPartition(r.topic, r.partition): ElectionResult(
                r.leader, error_from_code(r.error, r.error_message) if r.error else None
            )
            for r in response.partitions  # type: ignore[attr-defined]
        }

    def describe_log_dirs(
        self, node_ids: Iterable[int] = ()
    ) -> dict[int, dict[TopicPartition, ReplicaLogDir] | SeglogError]:
        """Per node (every node when none is named): its partitions' logs, or why it did not
        answer."""
        request = gateway_pb2.DescribeLogDirsRequest(node_ids=list(node_ids))
        response = self._client.call("DescribeLogDirs", request)
        out: dict[int, dict[TopicPartition, ReplicaLogDir] | SeglogError] = {}
        for node in response.nodes:  # type: ignore[attr-defined]
            if node.error:
                out[node.node_id] = error_from_code(node.error, node.error_message)
                continue
            out[node.node_id] = {
                TopicPartition(p.topic, p.partition): ReplicaLogDir(
                    p.size_bytes, p.log_start_offset, p.log_end_offset
                )
                for p in node.partitions
            }
        return out

    def decommission_node(self, node_id: int) -> int:
        """Mark a node decommissioned, durably: it takes no new replica and hands its
        leaderships to other in-sync replicas; its replicas stay until moved (the CLI's
        `nodes decommission` moves them). Returns the leaderships moved off it."""
        request = gateway_pb2.NodeStateRequest(node_id=node_id)
        response = self._client.call("DecommissionNode", request)
        return int(response.leaderships_moved)  # type: ignore[attr-defined]

    def recommission_node(self, node_id: int) -> None:
        """Undo `decommission_node`: the node may take new replicas and lead again."""
        self._client.call("RecommissionNode", gateway_pb2.NodeStateRequest(node_id=node_id))
