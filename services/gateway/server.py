"""Assembles a gateway: registry, node connections, the Gateway and Registry services,
health, reflection and tracing."""

from __future__ import annotations

import logging

import grpc
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider

from seglog.security.principals import PrincipalMapper
from seglog.security.tls import channel_credentials
from services import serving
from services.memory_pool import RequestMemoryPool
from services.settings import described_settings

from .authorization import Authorization
from .cluster.acl_admin import AclAdmin
from .cluster.acl_service import AclService
from .cluster.admin_service import AdminService
from .cluster.auto_balance import AutoBalancer
from .cluster.auto_create import TopicAutoCreation
from .cluster.broker_configs import BrokerConfigs
from .cluster.client_quotas import ClientQuotaAdmin
from .cluster.controller import Controller
from .cluster.node_admin import NodeAdmin
from .cluster.partition_moves import PartitionMoves
from .cluster.producer_ids import ProducerIds
from .cluster.quota_service import QuotaService
from .cluster.reassignment_service import ReassignmentService
from .cluster.registry import Registry
from .cluster.registry_service import RegistryService
from .cluster.replication_throttles import ReplicationThrottles
from .cluster.topic_admin import TopicAdmin
from .cluster.topic_descriptions import TopicDescriptions
from .cluster.user_scram import UserScram
from .coordination.gateway_roles import gateway_roles
from .coordinators import OffsetsExpiry, build_coordinators
from .fetch_memory import FetchAnswerMemoryInterceptor
from .fetch_threads import FetchThreadsInterceptor
from .gateway_metrics import GatewayMetrics
from .groups import group_metrics
from .grpc_services import (
    CLIENT_METHOD_THREADS,
    CLIENT_SERVICES,
    REGISTRY_SERVICE,
    GrpcServicers,
    clients_credentials,
    grpc_handlers,
    log_request_bounds,
)
from .internal_listener import build_internal_server, build_peer_server, default_internal_listen
from .internal_listener import describe as describe_internal_listener
from .kafka.apis import kafka_api_table
from .kafka.core import KafkaCore
from .kafka.listener import KafkaListener
from .node_connections import NodeConnections
from .registry_backing import registry_backing
from .request_memory import RequestMemoryInterceptor
from .routing.fetch_relay import configured_relays
from .routing.producer_states import ProducerStates
from .routing.quotas import ClientQuotas
from .routing.service import GatewayService
from .settings import GatewayConfig
from .share import share_metrics
from .share.forwarding import SERVICE_NAME as SHARE_STATE_SERVICE
from .share.share_service import ShareGroupsService
from .transactions.transactions_core import TransactionsCore

logger = logging.getLogger(__name__)


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.config = config
        # Shared by every connection, gRPC and Kafka (queued.max.request.bytes).
        self.request_memory = RequestMemoryPool(config.queued_max_request_bytes)
        # Fetches hold at most half the gRPC threads (fetch_threads.py).
        self.fetch_threads = FetchThreadsInterceptor()
        # gRPC fetch answers reserve their bytes from the same pool (fetch_memory.py).
        self.fetch_memory = FetchAnswerMemoryInterceptor(
            self.request_memory, self.fetch_threads.slots.limit
        )
        backing = registry_backing(config)
        self.keyspace = backing.keyspace
        self.registry = Registry(
            config.data_dir,
            session_timeout_ms=config.session_timeout_ms,
            max_partitions_per_topic=config.max_partitions_per_topic,
            max_partitions=config.max_partitions,
            default_replication_factor=config.default_replication_factor,
            num_partitions=config.num_partitions,
            remote_log_storage_system_enable=config.remote_log_storage_system_enable,
            store=backing.store,
            sessions=backing.sessions,
        )
        roles = gateway_roles(self.keyspace, config.gateway_session_timeout_ms)
        self.gateway_session = roles.session
        self.election = roles.election
        self.coordination = roles.coordination
        self.txn_coordination = roles.txn_coordination
        self.share_coordination = roles.share_coordination
        acls_offset = self.registry.metadata_offset  # read first: never newer than the ACLs
        self.authorization = Authorization(
            self.registry.acls,
            acls_offset=acls_offset,
            enabled=config.authorizer,
            super_users=config.super_users,
            allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
            tokens=config.tokens,
            mapper=PrincipalMapper(config.ssl_principal_mapping_rules)
            if config.ssl_principal_mapping_rules
            else None,
        )
        self.registry.acl_listeners.append(self.authorization.update)
        self.connections = NodeConnections(
            tracer_provider,
            credentials=None if config.tls is None else channel_credentials(config.tls),
        )
        self.controller = Controller(
            self.registry,
            self.connections,
            auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_seconds=config.leader_imbalance_check_interval_seconds,
            election=self.election,
            auto_balancer=AutoBalancer(
                self.registry,
                max_moves=config.auto_balance_max_moves,
                throttle_bytes_per_s=config.auto_balance_throttle_bytes_per_s,
            )
            if config.auto_balance_enable
            else None,
            auto_balance_interval_s=config.auto_balance_interval_ms / 1000,
        )
        self.service = GatewayService(
            self.registry,
            self.connections,
            max_unacknowledged_bytes=config.max_unacknowledged_bytes,
            cluster_secret=config.cluster_secret,
            fetch_grant_ttl_ms=config.fetch_grant_ttl_ms,
            authorization=self.authorization,
            **configured_relays(config, traced=tracer_provider is not None),
        )
        # The broker core's data plane, over the same routing: the Kafka listener's way in.
        self.data_plane = self.service.data_plane
        self.topic_admin = TopicAdmin(
            self.registry,
            self.connections,
            self.authorization,
            described_settings(config),
            offsets_topic_replication_factor=config.offsets_topic_replication_factor,
        )
        self.producer_ids = ProducerIds(self.registry, self.authorization)
        self.topic_descriptions = TopicDescriptions(
            self.registry, self.connections, self.authorization
        )
        self.node_admin = NodeAdmin(self.registry, self.authorization, self.cluster_view)
        self.admin = AdminService(
            self.topic_admin,
            self.producer_ids,
            self.topic_descriptions,
            self.node_admin,
            authorization=self.authorization,
        )
        self.auto_create = TopicAutoCreation(
            lambda name: name in self.registry.topics,
            self.topic_admin.start_default_topic,
            self.authorization,
            enabled=config.auto_create_topics_enable,
        )
        self.topic_descriptions.auto_create = self.auto_create
        self.acl_admin = AclAdmin(self.registry, self.authorization)
        self.acl_service = AclService(self.acl_admin, self.authorization)
        self.quota_admin = ClientQuotaAdmin(self.registry, self.authorization)
        self.quota_service = QuotaService(self.quota_admin, self.authorization)
        self.service.quotas = ClientQuotas(lambda: self.registry.client_quotas)
        self.record_deletion = self.service.record_deletion
        broker_configs = BrokerConfigs(self.registry, self.authorization)
        self.replication_throttles = ReplicationThrottles(
            lambda name: getattr(self.registry.topics.get(name), "configs", None) or {},
            lambda node_id, name: broker_configs.value(str(node_id), name),
        )
        self.partition_moves = PartitionMoves(
            self.registry, self.connections, self.authorization, self.replication_throttles
        )
        self.reassignment_service = ReassignmentService(self.partition_moves, self.authorization)
        self.registry_service = RegistryService(
            self.registry,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            node_certificates=config.tls is not None and config.tls.ca is not None,
            node_identity_prefix=config.node_identity_prefix,
        )
        coordinators = build_coordinators(
            config,
            self.registry,
            self.connections,
            self.authorization,
            self.topic_admin,
            self.producer_ids,
            self.data_plane,
            coordination=self.coordination,
            txn_coordination=self.txn_coordination,
            is_controller=lambda: self.election.is_controller,
            share_coordination=self.share_coordination,
            gateway_session=self.gateway_session,
        )
        self.offsets = coordinators.offsets
        self.coordinator = coordinators.coordinator
        self.groups = coordinators.groups
        self.consumer_groups = coordinators.consumer_groups
        self.membership = coordinators.membership
        self.share = coordinators.share
        self.share_state = coordinators.share_state
        self.transactions: TransactionsCore = coordinators.transactions
        self.service.relayed.transactions = coordinators.produce_verification
        self.group_calls = coordinators.group_calls
        self.group_service = coordinators.group_service
        self.txn_service = coordinators.txn_service
        self.offsets_expiry = OffsetsExpiry(config, coordinators)
        self.metrics = GatewayMetrics(
            meter_provider,
            self.registry,
            self.offsets,
            self.service.queries.per_leader_list_offsets,
            self.transactions,
        )
        self.service.metrics = self.metrics
        share_metrics.register(self.metrics, self.share)
        group_metrics.register(self.metrics, self.coordinator, self.consumer_groups)
        self.authorization.on_denied = self.metrics.denied
        self.tracer_provider = tracer_provider
        self.server: grpc.Server | None = None
        self.port = 0
        self.internal_server: grpc.Server | None = None
        self.peer_server: grpc.Server | None = None  # other gateways' calls
        self.internal_port = 0
        self.health_server: grpc.Server | None = None
        self.health_port = 0
        self.kafka_listener: KafkaListener | None = None

    @property
    def address(self) -> str:
        return f"{self.config.listen.rsplit(':', 1)[0]}:{self.port}"

    @property
    def advertised_address(self) -> str:
        return self.config.advertised_listener or self.address

    @property
    def kafka_address(self) -> str:
        """Where the Kafka listener listens (host:port); the gateway must have one."""
        return self._kafka.address

    @property
    def kafka_advertised_address(self) -> str:
        """What Kafka clients are told this gateway's address is (advertised.listeners)."""
        return self._kafka.advertised_address

    def kafka_node_address(self, node: int, *, bound: bool = True) -> tuple[str, int] | None:
        """What Kafka clients are told storage node `node`'s broker is at: its lane on this
        gateway's Kafka listener (kafka/node_lanes.py), None while it has none (`bound`
        False: where the rule puts it all the same)."""
        return self._kafka.node_address(node, bound=bound)

    @property
    def _kafka(self) -> KafkaListener:
        if self.kafka_listener is None:
            raise ValueError("this gateway has no Kafka listener (--kafka-listen)")
        return self.kafka_listener

    @property
    def kafka_core(self) -> KafkaCore:
        """What the Kafka adapter is given (kafka/core.py); this gateway is its peers' view."""
        return KafkaCore(
            registry=self.registry,
            authorization=self.authorization,
            service=self.service,
            data_plane=self.data_plane,
            record_deletion=self.record_deletion,
            topics=self.topic_admin,
            auto_create=self.auto_create,
            producer_ids=self.producer_ids,
            transactions=self.transactions,
            acls=self.acl_admin,
            quotas=self.quota_admin,
            partition_moves=self.partition_moves,
            groups=self.groups,
            membership=self.membership,
            group_calls=self.group_calls,
            coordinator=self.coordinator,
            share=self.share,
            user_scram=UserScram(self.registry, self.authorization),
            producer_states=ProducerStates(self.registry, self.connections, self.authorization),
            peers=self,
            request_memory=self.request_memory,
            tracer_provider=self.tracer_provider,
            tls=self.config.tls,
            tls_client_auth=self.config.tls_client_auth,
        )

    def cluster_view(self) -> tuple[str, list[str]]:
        """The controller gateway's address and every running gateway's."""
        if self.gateway_session is None:
            return self.advertised_address, [self.advertised_address]
        return self.election.controller_address, self.gateway_session.live_gateways()

    @property
    def internal_address(self) -> str:
        """Where nodes call the Registry: the internal listener (host:port), never the
        clients' listener."""
        host = self.internal_listen.rsplit(":", 1)[0]
        return f"{host}:{self.internal_port}"

    @property
    def internal_listen(self) -> str:
        return self.config.internal_listen or default_internal_listen(self.config.listen)

    def start(self) -> None:
        handlers = grpc_handlers(
            GrpcServicers(
                self.service,
                self.admin,
                self.group_service,
                self.acl_service,
                self.quota_service,
                self.reassignment_service,
                self.registry_service,
                self.txn_service,
                ShareGroupsService(self.share, self.authorization),
            ),
        )
        tls = self.config.tls
        # The Registry (nodes' calls) on a server of its own, other gateways' on another.
        self.internal_server, self.internal_port = build_internal_server(
            self.internal_listen,
            handlers.nodes,
            [REGISTRY_SERVICE],
            tls=tls,
            tracer_provider=self.tracer_provider,
        )
        self.internal_server.start()
        self.peer_server, self.peer_address = build_peer_server(
            self.internal_listen,
            self.share_state.handler(),
            SHARE_STATE_SERVICE,
            tls=tls,
            advertised=self.config.advertised_listener or self.config.listen,
        )
        log_request_bounds(
            self.config.max_concurrent_requests,
            self.config.max_request_bytes,
            self.config.queued_max_request_bytes,
        )
        self.server, health, self.port = serving.build_server(
            self.config.listen,
            handlers.clients,
            CLIENT_SERVICES,
            max_request_bytes=self.config.max_request_bytes,
            tracer_provider=self.tracer_provider,
            credentials=clients_credentials(tls, self.config.tls_client_auth),
            interceptors=[
                RequestMemoryInterceptor(self.request_memory),
                self.fetch_threads,
                self.fetch_memory,
            ],
            method_threads=CLIENT_METHOD_THREADS,
            max_concurrent_rpcs=max(self.config.max_concurrent_requests, 0) or None,
        )
        self.server.start()
        if self.config.health_listen:
            self.health_server, self.health_port = serving.health_server(
                self.config.health_listen, health
            )
        if self.config.kafka_listen:
            self.kafka_listener = KafkaListener(
                self.config.kafka_listen,
                kafka_api_table(),
                self.kafka_core,
                max_request_bytes=self.config.max_request_bytes,
                limits=self.config.kafka_listener_limits,
                advertised_listener=self.config.kafka_advertised_listener,
            )
            self.kafka_listener.start()
        self.offsets_expiry.start()
        self.transactions.start()
        self.consumer_groups.start()
        if self.gateway_session is not None:
            self.gateway_session.address = self.advertised_address
            if self.kafka_listener is not None:
                self.gateway_session.kafka_address = self.kafka_listener.advertised_address
            self.gateway_session.internal_address = self.peer_address
            self.gateway_session.start()  # campaigns for the controller role
        self.controller.start()
        logger.info("gateway serving on %s", self.address)
        if self.config.cluster_secret is None:
            logger.warning(
                "no cluster secret (SEGLOG_CLUSTER_SECRET): no transfer grants, so the bulk "
                "fetch path is off and consumers fetch through the gateway"
            )
        if self.kafka_listener is not None:
            logger.info("gateway's Kafka listener on %s", self.kafka_listener.address)
        logger.info(
            "gateway's internal listener (storage nodes) on %s (%s)",
            self.internal_address,
            describe_internal_listener(self.config.tls),
        )

    def expire_offsets(self) -> int:
        """One pass of committed-offset expiry (offsets.retention.minutes)."""
        return self.offsets_expiry.expire()

    def stop(self, grace_s: float = 10.0) -> None:
        self.offsets_expiry.stop()
        self.transactions.stop()
        if self.kafka_listener is not None:
            self.kafka_listener.stop()
        self.controller.stop()
        if self.gateway_session is not None:
            self.gateway_session.close()  # releases the controller role and groups at once
        if self.keyspace is not None:
            self.keyspace.close()
        if self.server is not None:
            self.server.stop(grace_s).wait()
        for internal in (self.internal_server, self.peer_server):
            if internal is not None:
                internal.stop(grace_s).wait()
        if self.health_server is not None:
            self.health_server.stop(0)
        self.coordinator.close()
        self.consumer_groups.stop()
        self.service.close()
        self.connections.close()
