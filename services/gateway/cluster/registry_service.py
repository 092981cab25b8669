"""The Registry service, the one storage nodes call: RegisterNode and Heartbeat keep a node's
session; AlterPartition carries a leader's ISR changes. With a cluster CA a node id is claimed
only with that node's certificate.

Answers are metadata deltas (gateway.proto NodeAssignment): registration answers the node's
whole assignment (`full`); a heartbeat answers only the states of its partitions changed
after the heartbeat's `metadata_offset` and the partitions removed from it, or its whole
assignment when that offset is 0, older than the registry's retained history or not one of
this registry's. Each answer carries the offset it brings the node to. A heartbeat with
nothing changed costs nothing per partition."""

from __future__ import annotations

import logging

import grpc

from seglog.errors import (
    InconsistentClusterIdError,
    InvalidRequestError,
    PermissionDeniedError,
    SeglogError,
)
from seglog.rpc.addresses import check_host_port
from seglog.rpc.status import abort, set_error
from seglog.security.certs import NODE_IDENTITY_PREFIX, node_identity
from seglog.security.tls import peer_identity
from seglog.v1 import gateway_pb2
from services.settings import BROKER_HEARTBEAT_INTERVAL_MS

from .controller import partition_states, view_states
from .registry import Registry

logger = logging.getLogger(__name__)


class RegistryService:
    """Node sessions: a new process's registration fences its previous incarnation
    (registry.py); each answer carries the states of the partitions the node holds replicas
    of, and AlterPartition carries leaders' ISR changes."""

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
        return self._register(request, context, new_process=True)

    def _register(
        self,
        request: gateway_pb2.NodeHeartbeat,
        context: grpc.ServicerContext,
        *,
        new_process: bool,
    ) -> gateway_pb2.NodeAssignment:
        if request.node_id < 0 or not request.address:
            abort(context, InvalidRequestError("a node registers with an id >= 0 and an address"))
        _check_bulk_address(request, context)
        self._check_cluster(request, context, registering=True)
        self.registry.register_node(
            request.node_id,
            request.address,
            _offline(request),
            dict(request.log_config_defaults),
            request.bulk_address,
            new_process=new_process,
            unclean_shutdown=new_process and request.unclean_shutdown,
        )
        logger.info(
            "node %d registered at %s%s",
            request.node_id,
            request.address,
            (" after an unclean shutdown" if request.unclean_shutdown else "")
            if new_process
            else " (a session this gateway did not know)",
        )
        return self._assignment(request, since=0)

    def Heartbeat(
        self, request: gateway_pb2.NodeHeartbeat, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeAssignment:
        self._check_node(context, request.node_id, "heartbeating")
        _check_bulk_address(request, context)
        self._check_cluster(request, context, registering=False)
        if not self.registry.heartbeat(
            request.node_id,
            request.address,
            _offline(request),
            request.bulk_address,
            request.metadata_offset,
        ):
            # A process that registered before (a new one calls RegisterNode first): this
            # gateway restarted, or fenced it after a missed session. Nothing was lost.
            return self._register(request, context, new_process=False)
        return self._assignment(request, since=request.metadata_offset)

    def _check_cluster(
        self,
        request: gateway_pb2.NodeHeartbeat,
        context: grpc.ServicerContext,
        *,
        registering: bool,
    ) -> None:
        """A node of another cluster is refused before anything of it is recorded, and so
        is a node holding partitions but no cluster id (a data dir from before cluster ids)
        that this registry never registered: a registry is never bootstrapped over another
        registry's data. Refused, the node stops (registry_client.py)."""
        cluster_id = self.registry.cluster_id
        if request.cluster_id:
            if request.cluster_id != cluster_id:
                abort(
                    context,
                    InconsistentClusterIdError(
                        f"node {request.node_id}'s data directory belongs to cluster "
                        f"{request.cluster_id}, and this registry is cluster {cluster_id}: "
                        f"point the node at its own cluster's registry; if that cluster is "
                        f"gone for good and its data is not wanted, move the node's data "
                        f"directory aside and start it empty"
                    ),
                )
            return
        if (
            registering
            and request.held_partitions > 0
            and request.node_id not in self.registry.image.node_addresses
        ):
            abort(
                context,
                InconsistentClusterIdError(
                    f"node {request.node_id} holds {request.held_partitions} partitions and "
                    f"no cluster id (no meta.properties), and this registry (cluster "
                    f"{cluster_id}) never registered node {request.node_id}: a registry is "
                    f"not bootstrapped over another's data. Point the node at the registry "
                    f"it registered with (make run ETCD=1 copies a data dir's file registry "
                    f"into etcd when etcd's is empty); if its partitions are not wanted, "
                    f"move the node's data directory aside and start it empty"
                ),
            )

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

    def _assignment(
        self, request: gateway_pb2.NodeHeartbeat, since: int
    ) -> gateway_pb2.NodeAssignment:
        should_shut_down = False
        if request.want_shutdown:
            should_shut_down = self.registry.controlled_shutdown(request.node_id)
        assignment = view_states(self.registry, self.registry.node_view(request.node_id, since))
        assignment.heartbeat_interval_ms = self.heartbeat_interval_ms
        assignment.should_shut_down = should_shut_down
        return assignment


def _offline(heartbeat: gateway_pb2.NodeHeartbeat) -> dict[tuple[str, int], str]:
    return {
        (p.topic, p.partition): p.offline_reason for p in heartbeat.partitions if p.offline_reason
    }


def _check_bulk_address(request: gateway_pb2.NodeHeartbeat, context: grpc.ServicerContext) -> None:
    """Other nodes' followers dial a node's bulk listener over plain TCP: a malformed address
    is refused here, not handed to them ("": the node has no bulk listener)."""
    if request.bulk_address:
        try:
            check_host_port(request.bulk_address, f"node {request.node_id}'s bulk address")
        except InvalidRequestError as exc:
            abort(context, exc)
