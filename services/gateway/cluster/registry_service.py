"""The Registry service, the one storage nodes call: RegisterNode and Heartbeat keep a node's
session and answer the states of the partitions it holds replicas of; AlterPartition carries
a leader's ISR changes. With a cluster CA a node id is claimed only with that node's
certificate."""

from __future__ import annotations

import logging

import grpc

from seglog.errors import InvalidRequestError, PermissionDeniedError, SeglogError
from seglog.rpc.status import abort, set_error
from seglog.security.certs import NODE_IDENTITY_PREFIX, node_identity
from seglog.security.tls import peer_identity
from seglog.v1 import gateway_pb2
from services.settings import BROKER_HEARTBEAT_INTERVAL_MS

from .controller import partition_states
from .registry import Registry

logger = logging.getLogger(__name__)


class RegistryService:
    """Node sessions: registration fences the node's previous incarnation (registry.py);
    each answer carries the states of the partitions the node holds replicas of, and
    AlterPartition carries leaders' ISR changes."""

    def __init__(
        self,
        registry: Registry,
        *,
        heartbeat_interval_ms: int = BROKER_HEARTBEAT_INTERVAL_MS,
        node_certificates: bool = False,
        node_identity_prefix: str = NODE_IDENTITY_PREFIX,
    ) -> None:
        self.registry = registry
        self.node_identity_prefix = node_identity_prefix
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # With TLS and a cluster CA: a node id is claimed only with that node's certificate.
        self.node_certificates = node_certificates

    def _check_node(self, context: grpc.ServicerContext, node_id: int, action: str) -> None:
        if not self.node_certificates:
            return
        identity = peer_identity(context)
        expected = node_identity(node_id, self.node_identity_prefix)
        if identity != expected:
            abort(
                context,
                PermissionDeniedError(
                    f"{action} as node {node_id} needs that node's certificate "
                    f"({expected}), not {identity or 'none'}"
                ),
            )

    def RegisterNode(
        self, request: gateway_pb2.NodeHeartbeat, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeAssignment:
        self._check_node(context, request.node_id, "registering")
        if request.node_id < 0 or not request.address:
            abort(context, InvalidRequestError("a node registers with an id >= 0 and an address"))
        self.registry.register_node(
            request.node_id,
            request.address,
            _offline(request),
            dict(request.log_config_defaults),
            request.bulk_address,
        )
        logger.info("node %d registered at %s", request.node_id, request.address)
        return self._assignment(request)

    def Heartbeat(
        self, request: gateway_pb2.NodeHeartbeat, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeAssignment:
        self._check_node(context, request.node_id, "heartbeating")
        if not self.registry.heartbeat(
            request.node_id, request.address, _offline(request), request.bulk_address
        ):
            return self.RegisterNode(request, context)
        return self._assignment(request)

    def AlterPartition(
        self, request: gateway_pb2.AlterPartitionRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.AlterPartitionResponse:
        self._check_node(context, request.node_id, "altering a partition")
        response = gateway_pb2.AlterPartitionResponse()
        try:
            self.registry.alter_partition(
                request.node_id,
                request.topic,
                request.partition,
                request.leader_epoch,
                request.partition_epoch,
                list(request.new_isr),
            )
        except SeglogError as exc:
            set_error(response, exc)
        states = partition_states(self.registry, [(request.topic, request.partition)])
        if states.partitions:
            response.partition.CopyFrom(states.partitions[0])
        return response

    def _assignment(self, request: gateway_pb2.NodeHeartbeat) -> gateway_pb2.NodeAssignment:
        should_shut_down = False
        if request.want_shutdown:
            should_shut_down = self.registry.controlled_shutdown(request.node_id)
        assignment = partition_states(self.registry, node_id=request.node_id)
        assignment.heartbeat_interval_ms = self.heartbeat_interval_ms
        assignment.full = True  # the node's whole assignment: what it does not name goes
        assignment.should_shut_down = should_shut_down
        return assignment


def _offline(heartbeat: gateway_pb2.NodeHeartbeat) -> dict[tuple[str, int], str]:
    return {
        (p.topic, p.partition): p.offline_reason for p in heartbeat.partitions if p.offline_reason
    }
