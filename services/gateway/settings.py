"""The gateway's settings, each declared once (services/settings.py derives the command line,
properties files, DescribeConfigs and the README's table from these fields)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seglog.rpc import grants
from seglog.rpc.channels import MAX_REQUEST_BYTES
from seglog.security.certs import NODE_IDENTITY_PREFIX
from seglog.security.tls import TlsFiles
from seglog.security.tokens import TokenVerifier
from services.memory_pool import DEFAULT_QUEUED_MAX_REQUEST_BYTES
from services.settings import (
    BROKER_HEARTBEAT_INTERVAL_MS,
    BROKER_SESSION_TIMEOUT_MS,
    Flag,
    setting,
)

from . import coordinator_settings
from .cluster.auto_balance import (
    DEFAULT_AUTO_BALANCE_INTERVAL_MS,
    DEFAULT_AUTO_BALANCE_MAX_MOVES,
    DEFAULT_AUTO_BALANCE_THROTTLE_BYTES_PER_S,
)
from .cluster.auto_create import DEFAULT_AUTO_CREATE_TOPICS_ENABLE
from .cluster.controller import DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S
from .cluster.topic_rules import (
    DEFAULT_MAX_PARTITIONS,
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    DEFAULT_NUM_PARTITIONS,
    DEFAULT_REPLICATION_FACTOR,
)
from .coordination.etcd_keys import DEFAULT_PREFIX
from .kafka.connection_quotas import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_IP,
    parse_overrides,
)
from .kafka.fetch_sessions import FetchSessionSettings
from .kafka.handler_pool import DEFAULT_NUM_IO_THREADS, DEFAULT_QUEUED_MAX_REQUESTS
from .kafka.listener import (
    DEFAULT_CONNECTIONS_FIRST_REQUEST_TIMEOUT_MS,
    DEFAULT_CONNECTIONS_MAX_IDLE_MS,
    DEFAULT_NUM_NETWORK_THREADS,
    ListenerLimits,
)
from .request_memory import DEFAULT_MAX_CONCURRENT_REQUESTS
from .routing.service import DEFAULT_MAX_UNACKNOWLEDGED_BYTES
from .setting_parsers import (
    parse_at_least_one,
    parse_kafka_listener,
    parse_per_ip_overrides,
    parse_tokens,
)
from .share.settings import (
    ShareSettings,
)


@dataclass(frozen=True)
class GatewayConfig:
    # The process's own, not the cluster's: DescribeConfigs does not show them.
    listen: str = setting("127.0.0.1:7070", "address to serve on", described=False)
    data_dir: Path = setting(Path("data/gateway"), "where the registry lives", described=False)
    # The registry's metadata log in etcd (metadata_etcd_store.py) under a key prefix,
    # instead of the data dir's metadata/: then several gateways share it, one of them
    # elected controller, groups spread over them.
    registry_etcd: str | None = setting(
        None,
        "keep the registry in etcd (host:port of its members, comma-separated, "
        "https://host:port for TLS) instead of the data dir: several gateways may then "
        "share it",
    )
    registry_etcd_prefix: str = setting(DEFAULT_PREFIX, "the registry's key prefix in etcd")
    # etcd over HTTPS with client certificates: etcd's JSON gateway refuses a client
    # certificate that has a common name, so the gateway dials etcd with a certificate of its
    # own, issued without one; and since names in certificates mean nothing to that gateway,
    # etcd's role-based auth takes a user and password (best set through the environment,
    # never shown).
    registry_etcd_tls: TlsFiles | None = setting(
        None,
        "TLS files for dialing https:// etcd endpoints",
        name="registry.etcd.security.protocol",
        flags=(
            Flag("--registry-etcd-cert", "PEM client certificate for etcd (no common name)"),
            Flag("--registry-etcd-key", "PEM private key"),
            Flag("--registry-etcd-ca", "PEM CA that signed etcd's certificate"),
        ),
        parse=TlsFiles.from_flags,
        show=lambda tls: "SSL" if tls is not None else "PLAINTEXT",
    )
    registry_etcd_user: str | None = setting(None, "etcd user, when etcd's auth is on")
    registry_etcd_password: str | None = setting(
        None, "that user's password", described=False, repr=False
    )
    # Kafka's advertised.listeners, for one listener.
    advertised_listener: str | None = setting(
        None,
        "host:port other gateways and clients reach this one at (default: the listen address)",
    )
    # Kafka's own protocol (services/gateway/kafka): one listener, PLAINTEXT://host:port.
    kafka_listen: str | None = setting(
        None,
        "serve Kafka's protocol here (PLAINTEXT://host:port or host:port; default: no "
        "Kafka listener); storage node N is a broker at this port + N, bound as it registers",
        name="listeners",
        flag="--kafka-listen",
        parse=parse_kafka_listener,
        described=False,
    )
    kafka_advertised_listener: str | None = setting(
        None,
        "host:port Kafka clients are told to reach this gateway at, and storage node N's "
        "broker at its port + N (default: the Kafka listener's address)",
        name="advertised.listeners",
        flag="--kafka-advertised-listen",
        parse=parse_kafka_listener,
        described=False,
    )
    kafka_max_connections: int = setting(
        DEFAULT_MAX_CONNECTIONS,
        "Kafka client connections served at once; past it new ones are closed (each costs a "
        "file descriptor and a few KiB, no thread; the gateway raises its open-files limit to "
        "fit, as far as the hard limit lets it)",
        name="max.connections",
        parse=parse_at_least_one,
    )
    max_connections_per_ip: int = setting(
        DEFAULT_MAX_CONNECTIONS_PER_IP,
        "Kafka client connections from one address at once; past it new ones are closed "
        "(Kafka's default is unbounded; a tenth of max.connections here, so one host cannot "
        "take them all)",
        parse=parse_at_least_one,
    )
    max_connections_per_ip_overrides: str = setting(
        "",
        "addresses allowed more (or fewer) Kafka connections than max.connections.per.ip: "
        "host:count,host:count (Kafka's syntax; a name is resolved at start)",
        parse=parse_per_ip_overrides,
    )
    connections_max_idle_ms: int = setting(
        DEFAULT_CONNECTIONS_MAX_IDLE_MS, "a Kafka connection idle this long is closed"
    )
    connections_first_request_timeout_ms: int = setting(
        DEFAULT_CONNECTIONS_FIRST_REQUEST_TIMEOUT_MS,
        "a Kafka connection that has not sent a complete request (on a SASL listener: not "
        "authenticated) this long after it was accepted is closed (not a Kafka setting: its "
        "broker waits for the idle timeout)",
        parse=parse_at_least_one,
    )
    num_network_threads: int = setting(
        DEFAULT_NUM_NETWORK_THREADS,
        "threads reading and writing the Kafka listener's connections (selectors, "
        "non-blocking sockets)",
        parse=parse_at_least_one,
    )
    num_io_threads: int = setting(
        DEFAULT_NUM_IO_THREADS,
        "threads running the Kafka listener's requests (produce and fetch, which wait on "
        "nodes or peers, run on a pool of their own: the gateway's bounds on waiting calls, "
        "24, plus this many; group joins and syncs wait on no thread)",
        parse=parse_at_least_one,
    )
    queued_max_requests: int = setting(
        DEFAULT_QUEUED_MAX_REQUESTS,
        "Kafka requests read and waiting for a handler thread; past it connections wait "
        "muted, unread",
        parse=parse_at_least_one,
    )
    max_incremental_fetch_session_cache_slots: int = setting(
        1000, "Kafka clients' fetch sessions (KIP-227) the Kafka listener keeps (0: none)"
    )
    # This gateway's etcd session (its lease): after it dies, its controller role and its
    # groups move to another gateway within this time.
    gateway_session_timeout_ms: int = setting(
        BROKER_SESSION_TIMEOUT_MS,
        "with etcd: this gateway's lease; its controller role and groups move when it lapses",
    )
    session_timeout_ms: int = setting(
        BROKER_SESSION_TIMEOUT_MS,
        "a node without a heartbeat for this long is down",
        name="broker.session.timeout.ms",
    )
    heartbeat_interval_ms: int = setting(
        BROKER_HEARTBEAT_INTERVAL_MS,
        "the heartbeat period asked of nodes",
        name="broker.heartbeat.interval.ms",
    )
    max_request_bytes: int = setting(
        MAX_REQUEST_BYTES,
        "the largest request the gateway's listeners take (gRPC and Kafka)",
        name="socket.request.max.bytes",
        flags=(),
    )
    queued_max_request_bytes: int = setting(
        DEFAULT_QUEUED_MAX_REQUEST_BYTES,
        "bytes of requests in flight (being read, decoded, relayed or answered) over all the "
        "gateway's connections, gRPC and Kafka; past it a request waits, then is refused "
        "retriably (Kafka's default is -1, unbounded; -1 here too turns the bound off). A gRPC "
        "fetch reserves its answer first, at most half of it over the fetch threads, and is "
        "answered smaller rather than refused",
    )
    max_concurrent_requests: int = setting(
        DEFAULT_MAX_CONCURRENT_REQUESTS,
        "gRPC calls running or waiting for a thread at once, over every thread pool (long polls, "
        "group joins and health checks included); past it gRPC refuses a call "
        "RESOURCE_EXHAUSTED before its request is decoded, and clients back off and retry. It "
        "bounds the calls whose requests gRPC holds before queued.max.request.bytes sees them "
        "(about three times a request per call served, one request per call queued); 88 leaves "
        "every thread busy and as many calls queued. Off (-1) by default. Nodes' calls are not "
        "counted (they have --internal-listen), nor the Kafka listener's connections",
    )
    offsets_topic_num_partitions: int = coordinator_settings.offsets_topic_num_partitions
    transaction_state_log_num_partitions: int = (
        coordinator_settings.transaction_state_log_num_partitions
    )
    transaction_max_timeout_ms: int = coordinator_settings.transaction_max_timeout_ms
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = (
        coordinator_settings.transaction_abort_timed_out_transaction_cleanup_interval_ms
    )
    group_initial_rebalance_delay_ms: int = coordinator_settings.group_initial_rebalance_delay_ms
    group_min_session_timeout_ms: int = coordinator_settings.group_min_session_timeout_ms
    group_max_session_timeout_ms: int = coordinator_settings.group_max_session_timeout_ms
    group_max_size: int = coordinator_settings.group_max_size
    group_consumer_session_timeout_ms: int = coordinator_settings.group_consumer_session_timeout_ms
    group_consumer_heartbeat_interval_ms: int = (
        coordinator_settings.group_consumer_heartbeat_interval_ms
    )
    group_consumer_migration_policy: str = coordinator_settings.group_consumer_migration_policy
    group_share_record_lock_duration_ms: int = (
        coordinator_settings.group_share_record_lock_duration_ms
    )
    group_share_delivery_count_limit: int = coordinator_settings.group_share_delivery_count_limit
    group_share_session_timeout_ms: int = coordinator_settings.group_share_session_timeout_ms
    share_auto_offset_reset: str = coordinator_settings.share_auto_offset_reset
    errors_deadletterqueue_topic_name: str = coordinator_settings.errors_deadletterqueue_topic_name
    errors_deadletterqueue_topic_name_prefix: str = (
        coordinator_settings.errors_deadletterqueue_topic_name_prefix
    )
    errors_deadletterqueue_auto_create_topics_enable: bool = (
        coordinator_settings.errors_deadletterqueue_auto_create_topics_enable
    )
    errors_deadletterqueue_copy_record_enable: bool = (
        coordinator_settings.errors_deadletterqueue_copy_record_enable
    )
    share_coordinator_state_topic_num_partitions: int = (
        coordinator_settings.share_coordinator_state_topic_num_partitions
    )
    max_partitions_per_topic: int = setting(
        DEFAULT_MAX_PARTITIONS_PER_TOPIC, "the most partitions one topic may have"
    )
    max_partitions: int = setting(
        DEFAULT_MAX_PARTITIONS, "the most partitions the whole cluster may have"
    )
    max_unacknowledged_bytes: int = setting(
        DEFAULT_MAX_UNACKNOWLEDGED_BYTES,
        "acks=0 produce bytes held while their nodes have not answered; past it, back off",
    )
    offsets_retention_minutes: int = coordinator_settings.offsets_retention_minutes
    offsets_retention_check_interval_ms: int = (
        coordinator_settings.offsets_retention_check_interval_ms
    )
    default_replication_factor: int = setting(
        DEFAULT_REPLICATION_FACTOR, "replicas of a topic created without a replication factor"
    )
    remote_log_storage_system_enable: bool = setting(
        False,
        "whether the storage nodes have an object store (their --remote-log-storage-*): "
        "topics may then set remote.storage.enable=true (true/false)",
    )
    num_partitions: int = setting(
        DEFAULT_NUM_PARTITIONS,
        "partitions of a topic created without a count, or auto-created",
        parse=parse_at_least_one,
    )
    auto_create_topics_enable: bool = setting(
        DEFAULT_AUTO_CREATE_TOPICS_ENABLE, "create a missing topic a client names (true/false)"
    )
    offsets_topic_replication_factor: int = coordinator_settings.offsets_topic_replication_factor
    auto_leader_rebalance_enable: bool = setting(
        True, "give leadership back to each partition's preferred replica (true/false)"
    )
    leader_imbalance_check_interval_seconds: int = setting(
        DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S, "how often preferred leaders are restored"
    )
    auto_balance_enable: bool = setting(
        False,
        "when the nodes change (one joins, a decommissioned one leaves), spread replicas "
        "and leaders over them to within one (true/false)",
    )
    auto_balance_max_moves: int = setting(
        DEFAULT_AUTO_BALANCE_MAX_MOVES,
        "automatic balancing: the most replicas being added at once (every move counted)",
    )
    auto_balance_throttle_bytes_per_s: int = setting(
        DEFAULT_AUTO_BALANCE_THROTTLE_BYTES_PER_S,
        "automatic balancing: each new replica's catch-up rate (0: unthrottled)",
    )
    auto_balance_interval_ms: int = setting(
        DEFAULT_AUTO_BALANCE_INTERVAL_MS, "automatic balancing: how often a round runs"
    )
    # Signs bulk transfer grants (shared with the nodes); None: the bulk path is off. Never
    # shown: DescribeConfigs says only whether one is set.
    cluster_secret: bytes | None = setting(
        None,
        "secret shared with the nodes to sign bulk transfer grants (16+ characters); "
        "without it the bulk fetch path and produce grants are off",
        parse=grants.cluster_secret,
        described_name="bulk.fetch.enabled",
        show=lambda secret: str(secret is not None).lower(),
        repr=False,
    )
    fetch_grant_ttl_ms: int = setting(
        grants.DEFAULT_GRANT_TTL_MS, "how long a bulk transfer grant (fetch or produce) stays valid"
    )
    bulk_produce_relay_enable: bool = setting(
        True,
        "with the cluster secret, relay produce requests to the leaders over their bulk "
        "listeners rather than gRPC (true/false)",
    )
    bulk_fetch_relay_enable: bool = setting(
        True,
        "with the cluster secret, relay consumers' fetches to the leaders over their bulk "
        "listeners rather than gRPC (true/false)",
    )
    # TLS on the gateway's listener (certificate subject `gateway`). With the cluster CA it
    # is mutual TLS: every caller presents a certificate from that CA (gRPC's Python server
    # can require client certificates or not ask for them, nothing between), storage nodes
    # their own (node-<id>) to register, heartbeat or alter partitions; the gateway dials
    # the nodes with its certificate.
    tls: TlsFiles | None = setting(
        None,
        "TLS files",
        name="security.protocol",
        flags=(
            Flag("--tls-cert", "PEM certificate (gateway)"),
            Flag("--tls-key", "PEM private key"),
            Flag(
                "--tls-ca",
                "PEM cluster CA: every caller (nodes: node-<id>) presents a certificate from it",
            ),
        ),
        parse=TlsFiles.from_flags,
        show=lambda tls: "SSL" if tls is not None else "PLAINTEXT",
    )
    # "required": every client of the listener above presents a certificate from the CA;
    # "none": clients are not asked for one (they authenticate with bearer tokens). Nodes
    # never call that listener: theirs is `internal_listen`, mutual TLS with the CA either way.
    tls_client_auth: str = setting(
        "required",
        "required: clients present certificates; none: they use bearer tokens (nodes call "
        "the --internal-listen address, mutual TLS either way)",
        choices=("required", "none"),
    )
    # Kafka's separate control plane listener (KIP-291): internal_listener.py.
    internal_listen: str | None = setting(
        None,
        "the storage nodes' listener (register, heartbeat, ISR changes): its own threads and "
        "limits, outside queued.max.request.bytes; mutual TLS with --tls-ca, plaintext without "
        "TLS (default: the --listen host on port 7090, any free port when --listen's is 0)",
    )
    # The CN prefix of nodes' certificates (`node-`: node 3 holds `node-3`).
    node_identity_prefix: str = setting(
        NODE_IDENTITY_PREFIX,
        "nodes' certificates name them <prefix><id>: only that certificate claims the id",
        flag="--tls-node-identity-prefix",
    )
    # A plaintext listener for the health service alone (Kubernetes' probes speak no TLS).
    health_listen: str | None = setting(
        None, "a plaintext listener for the health service only (probes that cannot speak TLS)"
    )
    # Bearer tokens (security/tokens.py): a JWT key set and/or a static token file.
    tokens: TokenVerifier | None = setting(
        None,
        "bearer tokens",
        flags=(
            Flag("--oauth-jwks-file", "JWT key set for bearer tokens"),
            Flag("--token-file", "static bearer tokens: '<token> <name>' lines"),
            Flag("--oauth-audience", "required JWT audience"),
        ),
        parse=parse_tokens,
        described=False,
    )
    ssl_principal_mapping_rules: str = setting(
        "",
        "Kafka's RULE:pattern/replacement/[LU],...,DEFAULT over the certificate's subject DN "
        "(default: its CN)",
    )
    # Kafka's authorizer (authorizer.class.name set), super.users and
    # allow.everyone.if.no.acl.found (false, as with Kafka's StandardAuthorizer).
    authorizer: bool = setting(
        False, "check every call against the ACLs (Kafka's authorizer; true/false)"
    )
    super_users: tuple[str, ...] = setting(
        (), "principals allowed everything, ';'-separated (Kafka's super.users: User:admin)"
    )
    allow_everyone_if_no_acl_found: bool = setting(
        False, "a resource no ACL names is open to all (true/false)"
    )

    @property
    def share_settings(self) -> ShareSettings:
        return ShareSettings(
            group_share_record_lock_duration_ms=self.group_share_record_lock_duration_ms,
            group_share_delivery_count_limit=self.group_share_delivery_count_limit,
            group_share_session_timeout_ms=self.group_share_session_timeout_ms,
            share_auto_offset_reset=self.share_auto_offset_reset,
            errors_deadletterqueue_topic_name=self.errors_deadletterqueue_topic_name,
            errors_deadletterqueue_topic_name_prefix=self.errors_deadletterqueue_topic_name_prefix,
            errors_deadletterqueue_auto_create_topics_enable=(
                self.errors_deadletterqueue_auto_create_topics_enable
            ),
            errors_deadletterqueue_copy_record_enable=(
                self.errors_deadletterqueue_copy_record_enable
            ),
            share_coordinator_state_topic_num_partitions=(
                self.share_coordinator_state_topic_num_partitions
            ),
        )

    @property
    def kafka_listener_limits(self) -> ListenerLimits:
        """The Kafka listener's threads and bounds, from the settings above."""
        return ListenerLimits(
            max_connections=self.kafka_max_connections,
            max_connections_per_ip=self.max_connections_per_ip,
            max_connections_per_ip_overrides=tuple(
                parse_overrides(self.max_connections_per_ip_overrides).items()
            ),
            connections_max_idle_ms=self.connections_max_idle_ms,
            connections_first_request_timeout_ms=self.connections_first_request_timeout_ms,
            num_network_threads=self.num_network_threads,
            num_io_threads=self.num_io_threads,
            queued_max_requests=self.queued_max_requests,
            fetch_sessions=FetchSessionSettings(self.max_incremental_fetch_session_cache_slots),
        )
