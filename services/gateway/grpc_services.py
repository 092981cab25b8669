"""The gateway's gRPC API: its five services' method tables, each method a servicer's
(the Gateway service's admin, ACL, quota and reassignment calls are adapters over the broker
core; Produce, Fetch and the per-leader queries are the data plane's; the GroupCoordinator
service's; the TransactionCoordinator service's; the ShareGroups service's, over the share
core), registered here by name as the Kafka adapter's APIs are in kafka/apis.py. `server.py`
serves the Gateway, GroupCoordinator, TransactionCoordinator and ShareGroups services on the
clients' listener and the Registry service on the nodes' own (internal_listener.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple

import grpc

from seglog.rpc import wire
from seglog.security.tls import TlsFiles, server_credentials
from seglog.v1 import gateway_pb2, groups_pb2, share_groups_pb2, transactions_pb2
from services import serving
from services.wait_slots import SERVER_MAX_WORKERS

from .cluster.acl_service import AclService
from .cluster.admin_service import AdminService
from .cluster.quota_service import QuotaService
from .cluster.reassignment_service import ReassignmentService
from .cluster.registry_service import RegistryService
from .fetch_threads import FETCH_METHOD, FETCH_POOL_THREADS
from .groups.group_service import GroupCoordinatorService
from .routing.service import GatewayService
from .share.share_service import ShareGroupsService
from .transactions.txn_service import TransactionCoordinatorService

logger = logging.getLogger(__name__)

GATEWAY_SERVICE_DESCRIPTOR = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"]
REGISTRY_SERVICE_DESCRIPTOR = gateway_pb2.DESCRIPTOR.services_by_name["Registry"]
GROUPS_SERVICE_DESCRIPTOR = groups_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"]
GATEWAY_SERVICE = GATEWAY_SERVICE_DESCRIPTOR.full_name
REGISTRY_SERVICE = REGISTRY_SERVICE_DESCRIPTOR.full_name
GROUPS_SERVICE = GROUPS_SERVICE_DESCRIPTOR.full_name
TXN_SERVICE_DESCRIPTOR = transactions_pb2.DESCRIPTOR.services_by_name["TransactionCoordinator"]
TXN_SERVICE = TXN_SERVICE_DESCRIPTOR.full_name
SHARE_GROUPS_SERVICE_DESCRIPTOR = share_groups_pb2.DESCRIPTOR.services_by_name["ShareGroups"]
SHARE_GROUPS_SERVICE = SHARE_GROUPS_SERVICE_DESCRIPTOR.full_name
# The services on the clients' listener (their health is reported by name).
CLIENT_SERVICES = [GATEWAY_SERVICE, GROUPS_SERVICE, TXN_SERVICE, SHARE_GROUPS_SERVICE]
# A share consumer's ShareFetch waits up to its fetch.max.wait.ms for records, as a Fetch
# does: on a pool of its own, so that many share consumers waiting never take the threads
# heartbeats, commits and admin calls need.
SHARE_FETCH_METHOD = f"/{SHARE_GROUPS_SERVICE}/ShareFetch"
SHARE_FETCH_POOL_THREADS = 16
CLIENT_METHOD_THREADS = {
    FETCH_METHOD: FETCH_POOL_THREADS,
    SHARE_FETCH_METHOD: SHARE_FETCH_POOL_THREADS,
}


@dataclass(frozen=True)
class GrpcServicers:
    gateway: GatewayService
    admin: AdminService
    groups: GroupCoordinatorService
    acls: AclService
    quotas: QuotaService
    reassignments: ReassignmentService
    registry: RegistryService
    transactions: TransactionCoordinatorService
    share: ShareGroupsService  # seglog's share consumer's calls (share_groups.proto)


class GrpcHandlers(NamedTuple):
    # Gateway, GroupCoordinator, TransactionCoordinator, ShareGroups
    clients: list[grpc.GenericRpcHandler]
    nodes: list[grpc.GenericRpcHandler]  # the Registry service, on the internal listener


def grpc_handlers(servicers: GrpcServicers) -> GrpcHandlers:
    """The five services' handlers, the clients' and the nodes'. Every client-facing method is
    authorized by the core it calls, on the call's Caller; nodes' Registry calls are checked
    by their certificates."""
    s, a, g = servicers.gateway, servicers.admin, servicers.groups
    acls = servicers.acls
    moves = servicers.reassignments
    gateway = serving.unary_handlers(
        GATEWAY_SERVICE_DESCRIPTOR,
        {
            "CreateTopics": a.CreateTopics,
            "DeleteTopics": a.DeleteTopics,
            "DescribeConfigs": a.DescribeConfigs,
            "AlterConfigs": a.AlterConfigs,
            "CreatePartitions": a.CreatePartitions,
            "ListTopics": a.ListTopics,
            "DescribeTopics": a.DescribeTopics,
            "DescribeCluster": a.DescribeCluster,
            "DecommissionNode": a.DecommissionNode,
            "RecommissionNode": a.RecommissionNode,
            "ListOffsets": s.ListOffsets,
            "SplitPoints": s.SplitPoints,
            "DeleteRecords": s.DeleteRecords,
            "FetchGrants": s.FetchGrants,
            "ProduceGrants": s.ProduceGrants,
            "CreateAcls": acls.CreateAcls,
            "DescribeAcls": acls.DescribeAcls,
            "DeleteAcls": acls.DeleteAcls,
            "InitProducerId": a.InitProducerId,
            "AlterPartitionReassignments": moves.AlterPartitionReassignments,
            "ListPartitionReassignments": moves.ListPartitionReassignments,
            "ElectLeaders": moves.ElectLeaders,
            "DescribeLogDirs": moves.DescribeLogDirs,
            "AlterClientQuotas": servicers.quotas.AlterClientQuotas,
            "DescribeClientQuotas": servicers.quotas.DescribeClientQuotas,
        },
    )
    # Produce and Fetch take the request's wire bytes: the gateway forwards them.
    gateway["Produce"] = grpc.unary_unary_rpc_method_handler(
        s.Produce,
        request_deserializer=wire.identity,
        response_serializer=wire.identity,
    )
    gateway["Fetch"] = grpc.unary_stream_rpc_method_handler(
        s.Fetch,
        request_deserializer=wire.identity,
        response_serializer=wire.identity,
    )
    r = servicers.registry
    registry = serving.unary_handlers(
        REGISTRY_SERVICE_DESCRIPTOR,
        {
            "RegisterNode": r.RegisterNode,
            "Heartbeat": r.Heartbeat,
            "AlterPartition": r.AlterPartition,
        },
    )
    groups = serving.unary_handlers(
        GROUPS_SERVICE_DESCRIPTOR,
        {
            name: getattr(g, name)
            for name in GROUPS_SERVICE_DESCRIPTOR.methods_by_name  # every one is g's
        },
    )
    transactions = serving.unary_handlers(
        TXN_SERVICE_DESCRIPTOR,
        {
            name: getattr(servicers.transactions, name)
            for name in TXN_SERVICE_DESCRIPTOR.methods_by_name  # every one is the servicer's
        },
    )
    share = serving.unary_handlers(
        SHARE_GROUPS_SERVICE_DESCRIPTOR,
        {
            name: getattr(servicers.share, name)
            for name in SHARE_GROUPS_SERVICE_DESCRIPTOR.methods_by_name  # every one is share's
        },
    )
    return GrpcHandlers(
        [
            grpc.method_handlers_generic_handler(GATEWAY_SERVICE, gateway),
            grpc.method_handlers_generic_handler(GROUPS_SERVICE, groups),
            grpc.method_handlers_generic_handler(TXN_SERVICE, transactions),
            grpc.method_handlers_generic_handler(SHARE_GROUPS_SERVICE, share),
        ],
        [grpc.method_handlers_generic_handler(REGISTRY_SERVICE, registry)],
    )


def clients_credentials(
    tls: TlsFiles | None, tls_client_auth: str
) -> grpc.ServerCredentials | None:
    """The clients' listener's credentials: plaintext without TLS; client certificates asked
    for only when required and a CA is given to check them."""
    if tls is None:
        return None
    required = tls.ca is not None and tls_client_auth == "required"
    return server_credentials(tls, "required" if required else "none")


def log_request_bounds(
    max_concurrent_requests: int, max_request_bytes: int, queued_max_request_bytes: int
) -> None:
    """gRPC decodes a request before any interceptor can hold it back: that path's own bound
    is the calls it takes at once x the largest request, said beside the pool's."""
    logger.info(
        "gRPC requests: up to max.concurrent.requests %d calls (%d threads) x "
        "socket.request.max.bytes %d decoding at once, before queued.max.request.bytes %d "
        "admits them",
        max_concurrent_requests,
        SERVER_MAX_WORKERS + sum(CLIENT_METHOD_THREADS.values()),
        max_request_bytes,
        queued_max_request_bytes,
    )
