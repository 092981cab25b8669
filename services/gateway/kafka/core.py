"""What the Kafka adapter is given of the gateway: the core objects its handlers call, and the
view of the cluster's gateways that brokers.py presents as Kafka brokers.

The adapter never holds the whole `Gateway` (server.py): the composition root builds one of
these and hands it to the listener, so the import arrows run one way, server.py -> kafka/ ->
the planes (ARCHITECTURE.md), and a handler can reach only what is named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace

from seglog.security.tls import TlsFiles
from services.memory_pool import RequestMemoryPool

from ..authorization import Authorization
from ..cluster.acl_admin import AclAdmin
from ..cluster.auto_create import TopicAutoCreation
from ..cluster.client_quotas import ClientQuotaAdmin
from ..cluster.partition_moves import PartitionMoves
from ..cluster.producer_ids import ProducerIds
from ..cluster.registry import Registry
from ..cluster.topic_admin import TopicAdmin
from ..cluster.user_scram import UserScram
from ..coordination.election import ControllerElection, SoleController
from ..coordination.gateway_session import GatewaySession
from ..groups.coordinator import GroupCoordinator
from ..groups.group_calls import GroupCalls
from ..groups.groups_core import GroupsCore
from ..groups.membership import GroupMembership
from ..routing.data_plane import DataPlane
from ..routing.producer_states import ProducerStates
from ..routing.record_deletion import RecordDeletion
from ..routing.service import GatewayService
from ..share.share_core import ShareGroups
from ..transactions.transactions_core import TransactionsCore


class GatewayPeers(Protocol):
    """This gateway and the others sharing its cluster, as far as Kafka's brokers are named
    from them (brokers.py); the gateway itself is one."""

    @property
    def advertised_address(self) -> str: ...  # its gRPC address, as coordination names it

    @property
    def kafka_advertised_address(self) -> str: ...

    # Its lane's address (kafka/node_lanes.py); `bound` False: the rule's, bound or not.
    def kafka_node_address(self, node: int, *, bound: bool = True) -> tuple[str, int] | None: ...

    @property
    def gateway_session(self) -> GatewaySession | None: ...  # None: the only gateway

    @property
    def election(self) -> ControllerElection | SoleController: ...


@dataclass(frozen=True)
class KafkaCore:
    registry: Registry
    authorization: Authorization
    service: GatewayService  # the gRPC data path's servicer (routing/)
    data_plane: DataPlane  # Produce, Fetch and ListOffsets for a Caller (routing/data_plane.py)
    record_deletion: RecordDeletion
    topics: TopicAdmin
    auto_create: TopicAutoCreation  # Metadata's topic auto-creation (auto_create.py)
    producer_ids: ProducerIds
    transactions: TransactionsCore  # the transaction coordinator (transactions/)
    acls: AclAdmin
    quotas: ClientQuotaAdmin
    partition_moves: PartitionMoves  # reassignments, elections, log dirs (partition_moves.py)
    groups: GroupsCore
    membership: GroupMembership  # joins, syncs, heartbeats, leaves (groups/membership.py)
    group_calls: GroupCalls  # offsets and group admin (groups/group_calls.py)
    coordinator: GroupCoordinator
    share: ShareGroups  # share groups (KIP-932): membership, ShareFetch/Acknowledge (share/)
    user_scram: UserScram  # SCRAM credentials (user_scram.py)
    producer_states: ProducerStates  # DescribeProducers (routing/producer_states.py)
    peers: GatewayPeers
    # Shared with the gRPC listener: queued.max.request.bytes bounds both together.
    request_memory: RequestMemoryPool
    tracer_provider: trace.TracerProvider | None = None
    # The gateway's certificate for SSL and SASL_SSL listeners, and whether a client
    # certificate from the cluster CA is required (as on the gRPC listener).
    tls: TlsFiles | None = None
    tls_client_auth: str = "none"
