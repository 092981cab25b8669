"""Assembles a gateway: registry, node connections, the Gateway and Registry services,
health, reflection and tracing."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider

from seglog.rpc import grants, wire
from seglog.rpc.channels import MAX_REQUEST_BYTES
from seglog.security.certs import NODE_IDENTITY_PREFIX
from seglog.security.principals import PrincipalMapper
from seglog.security.tls import TlsFiles, channel_credentials, server_credentials
from seglog.security.tokens import TokenVerifier
from seglog.v1 import gateway_pb2, groups_pb2
from services import serving

from .authorization import Authorization
from .cluster.acl_service import AclService
from .cluster.admin_service import AdminService
from .cluster.controller import Controller
from .cluster.registry import Registry
from .cluster.registry_service import RegistryService
from .cluster.registry_store import EtcdRegistryStore
from .cluster.topic_rules import (
    DEFAULT_MAX_PARTITIONS,
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    DEFAULT_REPLICATION_FACTOR,
)
from .coordination.election import ControllerElection, SoleController
from .coordination.etcd_keyspace import EtcdKeyspace
from .coordination.gateway_session import GatewaySession
from .coordination.group_coordinators import EtcdCoordination, SoleCoordinator
from .coordination.node_sessions import EtcdNodeSessions
from .gateway_metrics import GatewayMetrics
from .groups.coordinator import CoordinatorConfig, GroupCoordinator
from .groups.group_service import GroupCoordinatorService
from .groups.offsets_store import (
    DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    DEFAULT_OFFSETS_RETENTION_MINUTES,
    OffsetsStore,
)
from .node_connections import NodeConnections
from .routing.service import DEFAULT_MAX_UNACKNOWLEDGED_BYTES, GatewayService

logger = logging.getLogger(__name__)
GATEWAY_SERVICE_DESCRIPTOR = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"]
REGISTRY_SERVICE_DESCRIPTOR = gateway_pb2.DESCRIPTOR.services_by_name["Registry"]
GROUPS_SERVICE_DESCRIPTOR = groups_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"]
GATEWAY_SERVICE = GATEWAY_SERVICE_DESCRIPTOR.full_name
REGISTRY_SERVICE = REGISTRY_SERVICE_DESCRIPTOR.full_name
GROUPS_SERVICE = GROUPS_SERVICE_DESCRIPTOR.full_name
_SERVICES = (GATEWAY_SERVICE, REGISTRY_SERVICE, GROUPS_SERVICE)  # the order of _handlers()


@dataclass(frozen=True)
class GatewayConfig:
    listen: str = "127.0.0.1:7070"
    data_dir: Path = Path("data/gateway")
    # The registry in etcd (host:port of its members, comma-separated; etcd_keyspace.py)
    # under this key prefix, instead of registry.json in the data dir: then several
    # gateways share it, one of them elected controller, groups spread over them.
    registry_etcd: str | None = None
    registry_etcd_prefix: str = "/seglog"
    # How other gateways and clients reach this one (Kafka's advertised.listeners);
    # default the listen address with its bound port.
    advertised_listener: str | None = None
    # This gateway's etcd session (its lease): after it dies, its controller role and its
    # groups move to another gateway within this time.
    gateway_session_timeout_ms: int = 9000
    # Kafka's broker.session.timeout.ms and broker.heartbeat.interval.ms.
    session_timeout_ms: int = 9000
    heartbeat_interval_ms: int = 2000
    max_request_bytes: int = MAX_REQUEST_BYTES
    # Kafka's offsets.topic.num.partitions, group.initial.rebalance.delay.ms,
    # group.min.session.timeout.ms and group.max.session.timeout.ms.
    offsets_topic_num_partitions: int = 50
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC
    max_partitions: int = DEFAULT_MAX_PARTITIONS
    max_unacknowledged_bytes: int = DEFAULT_MAX_UNACKNOWLEDGED_BYTES
    # Kafka's offsets.retention.minutes and offsets.retention.check.interval.ms.
    offsets_retention_minutes: int = DEFAULT_OFFSETS_RETENTION_MINUTES
    offsets_retention_check_interval_ms: int = DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS
    # Kafka's replication settings of the controller and topic defaults.
    default_replication_factor: int = DEFAULT_REPLICATION_FACTOR
    offsets_topic_replication_factor: int = 3
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    # Signs bulk transfer grants (shared with the nodes); None: the bulk path is off.
    cluster_secret: bytes | None = dataclasses.field(default=None, repr=False)
    fetch_grant_ttl_ms: int = grants.DEFAULT_GRANT_TTL_MS
    # TLS on the gateway's listener (certificate subject `gateway`). With the cluster CA it
    # is mutual TLS: every caller presents a certificate from that CA (gRPC's Python server
    # can require client certificates or not ask for them, nothing between), storage nodes
    # their own (node-<id>) to register, heartbeat or alter partitions; the gateway dials
    # the nodes with its certificate.
    tls: TlsFiles | None = None
    # "required": every caller of the listener above presents a certificate from the CA;
    # "none": clients are not asked for one (they authenticate with bearer tokens), and the
    # Registry (nodes' calls, mutual TLS) moves to `internal_listen` (Kafka's separate
    # inter-broker listener), default the same host on any free port.
    tls_client_auth: str = "required"
    internal_listen: str | None = None
    # The CN prefix of nodes' certificates (`node-`: node 3 holds `node-3`).
    node_identity_prefix: str = NODE_IDENTITY_PREFIX
    # A plaintext listener for the health service alone (Kubernetes' probes speak no TLS).
    health_listen: str | None = None
    # Bearer tokens (security/tokens.py): a JWT key set and/or a static token file.
    tokens: TokenVerifier | None = None
    # Kafka's ssl.principal.mapping.rules over the certificate's subject DN ("": its CN).
    ssl_principal_mapping_rules: str = ""
    # Kafka's authorizer (authorizer.class.name set), super.users ("User:a;User:b") and
    # allow.everyone.if.no.acl.found (false, as with Kafka's StandardAuthorizer).
    authorizer: bool = False
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False


# The gateway's settings under the names Kafka gives the same broker settings.
_KAFKA_SETTING_NAMES = {
    "session_timeout_ms": "broker.session.timeout.ms",
    "heartbeat_interval_ms": "broker.heartbeat.interval.ms",
    "max_request_bytes": "socket.request.max.bytes",
}


def described_settings(config: GatewayConfig) -> dict[str, str]:
    """The settings DescribeConfigs shows for the cluster (the listen address and data dir
    are the process's, not the cluster's)."""
    out = {}
    for field in dataclasses.fields(config):
        if field.name in ("listen", "data_dir"):
            continue
        if field.name == "tokens":
            continue
        if field.name == "tls":
            out["security.protocol"] = "SSL" if config.tls is not None else "PLAINTEXT"
            continue
        if field.name == "cluster_secret":  # never shown; only whether one is set
            out["bulk.fetch.enabled"] = str(config.cluster_secret is not None).lower()
            continue
        name = _KAFKA_SETTING_NAMES.get(field.name, field.name.replace("_", "."))
        out[name] = str(getattr(config, field.name))
    return out


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.config = config
        self.keyspace: EtcdKeyspace | None = None
        store, sessions = None, None
        if config.registry_etcd is not None:
            self.keyspace = EtcdKeyspace(config.registry_etcd, config.registry_etcd_prefix)
            store = EtcdRegistryStore(self.keyspace)
            sessions = EtcdNodeSessions(self.keyspace, config.session_timeout_ms)
        self.registry = Registry(
            config.data_dir,
            session_timeout_ms=config.session_timeout_ms,
            max_partitions_per_topic=config.max_partitions_per_topic,
            max_partitions=config.max_partitions,
            default_replication_factor=config.default_replication_factor,
            store=store,
            sessions=sessions,
        )
        self.gateway_session: GatewaySession | None = None
        self.election: ControllerElection | SoleController
        self.coordination: EtcdCoordination | SoleCoordinator
        if self.keyspace is not None:
            self.gateway_session = GatewaySession(
                self.keyspace, "", config.gateway_session_timeout_ms
            )
            self.election = ControllerElection(self.keyspace, self.gateway_session)
            self.coordination = EtcdCoordination(self.keyspace, self.gateway_session)
            # Every subscriber has its first snapshot before anything routes or decides.
            self.keyspace.start_watch()
        else:
            self.election = SoleController()
            self.coordination = SoleCoordinator()
        self.authorization = Authorization(
            self.registry.acls,
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
        )
        self.service = GatewayService(
            self.registry,
            self.connections,
            max_unacknowledged_bytes=config.max_unacknowledged_bytes,
            cluster_secret=config.cluster_secret,
            fetch_grant_ttl_ms=config.fetch_grant_ttl_ms,
        )
        self.admin = AdminService(
            self.registry,
            self.connections,
            described_settings(config),
            offsets_topic_replication_factor=config.offsets_topic_replication_factor,
            authorization=self.authorization,
            cluster_view=self.cluster_view,
        )
        self.acl_service = AclService(self.registry)
        self.registry_service = RegistryService(
            self.registry,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            node_certificates=config.tls is not None and config.tls.ca is not None,
            node_identity_prefix=config.node_identity_prefix,
        )
        self.offsets = OffsetsStore(
            self.registry,
            self.connections,
            self.admin.create_internal_topic,
            num_partitions=config.offsets_topic_num_partitions,
        )
        self.admin.topic_deleted_listeners.append(self.offsets.delete_topic_offsets)
        self.coordinator = GroupCoordinator(
            self.registry,
            CoordinatorConfig(
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
            ),
            persist=self.offsets.store_group,
            load=self.offsets.group_metadata,
        )
        self._stop = threading.Event()
        self._expiry = threading.Thread(
            target=self._expire_offsets_loop, name="offsets-expiry", daemon=True
        )
        self.group_service = GroupCoordinatorService(
            self.registry, self.coordinator, self.offsets, coordination=self.coordination
        )
        self.group_service.lists_unclaimed = lambda: self.election.is_controller
        self.metrics = GatewayMetrics(
            meter_provider,
            self.registry,
            self.offsets,
            self.service.queries.per_leader_list_offsets,
        )
        self.service.metrics = self.metrics
        self.authorization.on_denied = self.metrics.denied
        self.tracer_provider = tracer_provider
        self.server: grpc.Server | None = None
        self.port = 0
        self.internal_server: grpc.Server | None = None
        self.internal_port = 0
        self.health_server: grpc.Server | None = None
        self.health_port = 0

    @property
    def address(self) -> str:
        return f"{self.config.listen.rsplit(':', 1)[0]}:{self.port}"

    @property
    def advertised_address(self) -> str:
        return self.config.advertised_listener or self.address

    def cluster_view(self) -> tuple[str, list[str]]:
        """The controller gateway's address and every running gateway's."""
        if self.gateway_session is None:
            return self.advertised_address, [self.advertised_address]
        return self.election.controller_address, self.gateway_session.live_gateways()

    def _handlers(self) -> list[grpc.GenericRpcHandler]:
        """The three services' handlers, in `_SERVICES` order. Every client-facing method is
        authorized (`guard`); nodes' Registry calls are checked by their certificates."""
        s, a, g = self.service, self.admin, self.group_service
        acls, guard = self.acl_service, self.authorization.guard
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
                "ListOffsets": s.queries.ListOffsets,
                "SplitPoints": s.queries.SplitPoints,
                "FetchGrants": s.FetchGrants,
                "CreateAcls": acls.CreateAcls,
                "DescribeAcls": acls.DescribeAcls,
                "DeleteAcls": acls.DeleteAcls,
                "InitProducerId": a.InitProducerId,
            },
            wrap=guard,
        )
        # Produce and Fetch take the request's wire bytes: the gateway forwards them.
        gateway["Produce"] = grpc.unary_unary_rpc_method_handler(
            guard("Produce", s.Produce),
            request_deserializer=wire.identity,
            response_serializer=wire.identity,
        )
        gateway["Fetch"] = grpc.unary_stream_rpc_method_handler(
            guard("Fetch", s.Fetch),
            request_deserializer=wire.identity,
            response_serializer=wire.identity,
        )
        r = self.registry_service
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
            wrap=guard,
        )
        return [
            grpc.method_handlers_generic_handler(GATEWAY_SERVICE, gateway),
            grpc.method_handlers_generic_handler(REGISTRY_SERVICE, registry),
            grpc.method_handlers_generic_handler(GROUPS_SERVICE, groups),
        ]

    @property
    def separate_internal_listener(self) -> bool:
        tls = self.config.tls
        return tls is not None and tls.ca is not None and self.config.tls_client_auth == "none"

    @property
    def internal_address(self) -> str:
        """Where nodes call the Registry: the internal listener when there is one."""
        if self.internal_server is None:
            return self.address
        host = (self.config.internal_listen or self.config.listen).rsplit(":", 1)[0]
        return f"{host}:{self.internal_port}"

    def start(self) -> None:
        handlers = self._handlers()
        tls = self.config.tls
        if self.separate_internal_listener:
            assert tls is not None
            registry = [
                h for h, name in zip(handlers, _SERVICES, strict=True) if name == REGISTRY_SERVICE
            ]
            listen = self.config.internal_listen or f"{self.config.listen.rsplit(':', 1)[0]}:0"
            self.internal_server, _, self.internal_port = serving.build_server(
                listen,
                registry,
                [REGISTRY_SERVICE],
                tracer_provider=self.tracer_provider,
                credentials=server_credentials(tls, "required"),
            )
            self.internal_server.start()
            handlers = [
                h for h, name in zip(handlers, _SERVICES, strict=True) if name != REGISTRY_SERVICE
            ]
        client_auth = "none"
        if tls is not None and tls.ca is not None and self.config.tls_client_auth == "required":
            client_auth = "required"
        self.server, health, self.port = serving.build_server(
            self.config.listen,
            handlers,
            [GATEWAY_SERVICE, GROUPS_SERVICE]
            + ([] if self.separate_internal_listener else [REGISTRY_SERVICE]),
            max_request_bytes=self.config.max_request_bytes,
            tracer_provider=self.tracer_provider,
            credentials=None if tls is None else server_credentials(tls, client_auth),
        )
        self.server.start()
        if self.config.health_listen:
            self.health_server, self.health_port = serving.health_server(
                self.config.health_listen, health
            )
        self._expiry.start()
        if self.gateway_session is not None:
            self.gateway_session.address = self.advertised_address
            self.gateway_session.start()  # campaigns for the controller role
        self.controller.start()
        logger.info("gateway serving on %s", self.address)
        if self.internal_server is not None:
            logger.info("gateway's internal listener (nodes) on %s", self.internal_address)

    def expire_offsets(self) -> int:
        """One pass of committed-offset expiry (offsets.retention.minutes)."""
        return self.offsets.expire_offsets(
            time.time_ns() // 1_000_000,
            self.config.offsets_retention_minutes * 60_000,
            self.coordinator.groups_with_members(),
        )

    def _expire_offsets_loop(self) -> None:
        while not self._stop.wait(self.config.offsets_retention_check_interval_ms / 1000):
            try:
                self.expire_offsets()
            except Exception:
                logger.exception("expiring committed offsets failed")

    def stop(self, grace_s: float = 10.0) -> None:
        self._stop.set()
        self.controller.stop()
        if self.gateway_session is not None:
            self.gateway_session.close()  # releases the controller role and groups at once
        if self.keyspace is not None:
            self.keyspace.close()
        if self.server is not None:
            self.server.stop(grace_s).wait()
        if self.internal_server is not None:
            self.internal_server.stop(grace_s).wait()
        if self.health_server is not None:
            self.health_server.stop(0)
        self.coordinator.close()
        self.connections.close()
