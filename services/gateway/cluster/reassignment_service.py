"""The Gateway service's calls for moving partitions: AlterPartitionReassignments,
ListPartitionReassignments, ElectLeaders and DescribeLogDirs, a thin gRPC adapter over the
typed core (partition_moves.py) that Kafka's APIs call too: protobuf in, the core's typed
requests and answers, SeglogErrors aborted as statuses."""

from __future__ import annotations

import grpc

from seglog.errors import SeglogError
from seglog.rpc.status import abort, set_error
from seglog.v1 import gateway_pb2

from ..authorization import Authorization
from .partition_moves import AlterReassignments, ElectionType, PartitionMoves, ReplicaTarget


class ReassignmentService:
    def __init__(self, moves: PartitionMoves, authorization: Authorization) -> None:
        self.moves = moves
        self.authorization = authorization

    def AlterPartitionReassignments(
        self,
        request: gateway_pb2.AlterPartitionReassignmentsRequest,
        context: grpc.ServicerContext,
    ) -> gateway_pb2.AlterPartitionReassignmentsResponse:
        targets = tuple(
            ReplicaTarget(e.topic, e.partition, None if e.cancel else tuple(e.replicas))
            for e in request.partitions
        )
        # The gRPC API's throttle is the request's own (0: none), never the Kafka configs'.
        altered = AlterReassignments(targets, request.throttle_bytes_per_s, request.validate_only)
        try:
            self.moves.alter(self.authorization.caller_of(context), altered)
        except SeglogError as exc:
            abort(context, exc)
        return gateway_pb2.AlterPartitionReassignmentsResponse()

    def ListPartitionReassignments(
        self,
        request: gateway_pb2.ListPartitionReassignmentsRequest,
        context: grpc.ServicerContext,
    ) -> gateway_pb2.ListPartitionReassignmentsResponse:
        wanted = [(p.topic, p.partition) for p in request.partitions] or None
        try:
            ongoing = self.moves.ongoing(self.authorization.caller_of(context), wanted)
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.ListPartitionReassignmentsResponse()
        for r in ongoing:
            response.reassignments.add(
                topic=r.topic,
                partition=r.partition,
                replicas=r.replicas,
                adding_replicas=r.adding,
                removing_replicas=r.removing,
                isr=r.isr,
                leader=r.leader,
                throttle_bytes_per_s=r.throttle_bytes_per_s,
            )
        return response

    def ElectLeaders(
        self, request: gateway_pb2.ElectLeadersRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.ElectLeadersResponse:
        kind: ElectionType = (
            "unclean" if request.election_type == gateway_pb2.UNCLEAN else "preferred"
        )
        wanted = [(p.topic, p.partition) for p in request.partitions] or None
        try:
            results = self.moves.elect(self.authorization.caller_of(context), kind, wanted)
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.ElectLeadersResponse()
        for r in results:
            result = response.partitions.add(topic=r.topic, partition=r.partition, leader=r.leader)
            if r.error is not None:
                set_error(result, r.error)
        return response

    def DescribeLogDirs(
        self, request: gateway_pb2.DescribeLogDirsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeLogDirsResponse:
        try:
            log_dirs = self.moves.describe_log_dirs(
                self.authorization.caller_of(context), list(request.node_ids)
            )
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.DescribeLogDirsResponse()
        for log_dir in log_dirs:
            node = response.nodes.add(node_id=log_dir.node_id)
            if log_dir.error is not None:
                set_error(node, log_dir.error)
            for p in log_dir.partitions:
                node.partitions.add(
                    topic=p.topic,
                    partition=p.partition,
                    size_bytes=p.size_bytes,
                    log_start_offset=p.log_start_offset,
                    log_end_offset=p.log_end_offset,
                )
        return response
