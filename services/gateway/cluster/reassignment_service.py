"""The Gateway service's calls for moving partitions: AlterPartitionReassignments,
ListPartitionReassignments, ElectLeaders (the registry's decisions: reassignments.py) and
DescribeLogDirs (asked of each node)."""

from __future__ import annotations

import logging

import grpc

from seglog.errors import InvalidReplicaAssignmentError, SeglogError
from seglog.rpc.status import abort, error_from_rpc, set_error
from seglog.v1 import common_pb2, gateway_pb2, storage_pb2

from ..node_connections import NodeConnections
from .partition_changes import PartitionChange
from .reassignments import PREFERRED, UNCLEAN, Target
from .registry import Registry

logger = logging.getLogger(__name__)

NODE_CALL_TIMEOUT_S = 10.0


def delete_replicas(
    registry: Registry, connections: NodeConnections, removed: dict[PartitionChange, list[int]]
) -> None:
    """The logs of replicas a move (or a cancelled move) took away are deleted on their
    nodes (Kafka's StopReplica with delete). A node that is down, or that set the partition
    aside on the registry's push before this call (kept on disk as `-stray`), keeps its copy
    for the operator."""
    addresses = registry.addresses()
    for (topic, partition), replicas in removed.items():
        for replica in replicas:
            if replica not in addresses or not registry.is_live(replica):
                continue
            stub = connections.get(replica, addresses[replica]).stub
            request = storage_pb2.DeletePartitionRequest(
                topic=topic, partition=partition, cluster_id=registry.cluster_id
            )
            try:
                stub.DeletePartition(request, timeout=NODE_CALL_TIMEOUT_S)
            except grpc.RpcError as exc:
                logger.info(
                    "deleting moved %s-%d on node %d: %s", topic, partition, replica, exc.code()
                )


class ReassignmentService:
    def __init__(self, registry: Registry, connections: NodeConnections) -> None:
        self.registry = registry
        self.connections = connections

    def AlterPartitionReassignments(
        self,
        request: gateway_pb2.AlterPartitionReassignmentsRequest,
        context: grpc.ServicerContext,
    ) -> gateway_pb2.AlterPartitionReassignmentsResponse:
        targets: dict[tuple[str, int], Target] = {}
        try:
            for entry in request.partitions:
                tp = (entry.topic, entry.partition)
                if tp in targets:
                    raise InvalidReplicaAssignmentError(
                        f"{entry.topic}-{entry.partition} is named twice in the request"
                    )
                targets[tp] = None if entry.cancel else list(entry.replicas)
            removed = self.registry.alter_reassignments(
                targets, request.throttle_bytes_per_s, validate_only=request.validate_only
            )
        except SeglogError as exc:
            abort(context, exc)
        delete_replicas(self.registry, self.connections, removed)
        return gateway_pb2.AlterPartitionReassignmentsResponse()

    def ListPartitionReassignments(
        self,
        request: gateway_pb2.ListPartitionReassignmentsRequest,
        context: grpc.ServicerContext,
    ) -> gateway_pb2.ListPartitionReassignmentsResponse:
        wanted = [(p.topic, p.partition) for p in request.partitions] or None
        response = gateway_pb2.ListPartitionReassignmentsResponse()
        for topic, i, p in self.registry.reassignments(wanted):
            response.reassignments.add(
                topic=topic.name,
                partition=i,
                replicas=p.replicas,
                adding_replicas=p.adding,
                removing_replicas=p.removing,
                isr=p.isr,
                leader=p.leader,
                throttle_bytes_per_s=p.throttle_bytes_per_s,
            )
        return response

    def ElectLeaders(
        self, request: gateway_pb2.ElectLeadersRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.ElectLeadersResponse:
        kind = UNCLEAN if request.election_type == gateway_pb2.UNCLEAN else PREFERRED
        wanted = [(p.topic, p.partition) for p in request.partitions] or None
        results = self.registry.elect_leaders(kind, wanted)
        response = gateway_pb2.ElectLeadersResponse()
        leaders = {(t.name, i): p.leader for t, i, p in self.registry.partitions_of(list(results))}
        for (topic, i), error in sorted(results.items()):
            result = response.partitions.add(topic=topic, partition=i, leader=-1)
            result.leader = leaders.get((topic, i), -1)
            if error is not None:
                set_error(result, error)
        return response

    def DescribeLogDirs(
        self, request: gateway_pb2.DescribeLogDirsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeLogDirsResponse:
        addresses = self.registry.addresses()
        wanted = sorted(request.node_ids) or sorted(addresses)
        calls = {}
        response = gateway_pb2.DescribeLogDirsResponse()
        for node_id in wanted:
            if node_id not in addresses or not self.registry.is_live(node_id):
                continue
            stub = self.connections.get(node_id, addresses[node_id]).stub
            calls[node_id] = stub.DescribePartitions.future(
                storage_pb2.DescribePartitionsRequest(), timeout=NODE_CALL_TIMEOUT_S
            )
        for node_id in wanted:
            node = response.nodes.add(node_id=node_id)
            call = calls.get(node_id)
            if call is None:
                node.error = common_pb2.NODE_UNAVAILABLE
                node.error_message = f"node {node_id} is not registered or not live"
                continue
            try:
                described = call.result()
            except grpc.RpcError as exc:
                set_error(node, error_from_rpc(exc))
                continue
            for state in sorted(described.partitions, key=lambda s: (s.topic, s.partition)):
                if state.error != common_pb2.NONE:
                    continue
                node.partitions.add(
                    topic=state.topic,
                    partition=state.partition,
                    size_bytes=state.size_bytes,
                    log_start_offset=state.log_start_offset,
                    log_end_offset=state.log_end_offset,
                )
        return response
