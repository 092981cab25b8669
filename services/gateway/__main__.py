"""python -m services.gateway --listen HOST:PORT --data-dir DIR"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seglog.rpc import grants
from seglog.security.certs import NODE_IDENTITY_PREFIX
from seglog.security.tls import TlsFiles
from seglog.security.tokens import TokenVerifier
from services import serving

from .cluster.topic_rules import (
    DEFAULT_MAX_PARTITIONS,
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    DEFAULT_REPLICATION_FACTOR,
)
from .groups.offsets_store import (
    DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    DEFAULT_OFFSETS_RETENTION_MINUTES,
)
from .routing.service import DEFAULT_MAX_UNACKNOWLEDGED_BYTES
from .server import Gateway, GatewayConfig


def parse_args(argv: list[str] | None = None) -> GatewayConfig:
    parser = argparse.ArgumentParser(prog="python -m services.gateway")
    serving.env_flag(
        parser, "--listen", "SEGLOG_LISTEN", "address to serve on", default="127.0.0.1:7070"
    )
    serving.env_flag(
        parser, "--data-dir", "SEGLOG_DATA_DIR", "where the registry lives", default="data/gateway"
    )
    serving.env_flag(
        parser,
        "--registry-etcd",
        "SEGLOG_REGISTRY_ETCD",
        "keep the registry in etcd (host:port of its members, comma-separated) instead of "
        "the data dir: several gateways may then share it",
    )
    serving.env_flag(
        parser,
        "--advertised-listener",
        "SEGLOG_ADVERTISED_LISTENER",
        "host:port other gateways and clients reach this one at (default: the listen address)",
    )
    serving.env_flag(
        parser,
        "--gateway-session-timeout-ms",
        "SEGLOG_GATEWAY_SESSION_TIMEOUT_MS",
        "with etcd: this gateway's lease; its controller role and groups move when it lapses",
        type=int,
        default=9000,
    )
    serving.env_flag(
        parser,
        "--registry-etcd-prefix",
        "SEGLOG_REGISTRY_ETCD_PREFIX",
        "the registry's key prefix in etcd",
        default="/seglog",
    )
    serving.env_flag(
        parser,
        "--session-timeout-ms",
        "SEGLOG_SESSION_TIMEOUT_MS",
        "a node without a heartbeat for this long is down",
        type=int,
        default=9000,
    )
    serving.env_flag(
        parser,
        "--heartbeat-interval-ms",
        "SEGLOG_HEARTBEAT_INTERVAL_MS",
        "the heartbeat period asked of nodes",
        type=int,
        default=2000,
    )
    serving.env_flag(
        parser,
        "--offsets-topic-num-partitions",
        "SEGLOG_OFFSETS_TOPIC_NUM_PARTITIONS",
        "partitions of __consumer_offsets, fixed when it is first created",
        type=int,
        default=50,
    )
    serving.env_flag(
        parser,
        "--group-initial-rebalance-delay-ms",
        "SEGLOG_GROUP_INITIAL_REBALANCE_DELAY_MS",
        "how long a new group waits for more members before its first assignment",
        type=int,
        default=3000,
    )
    serving.env_flag(
        parser,
        "--group-min-session-timeout-ms",
        "SEGLOG_GROUP_MIN_SESSION_TIMEOUT_MS",
        "the shortest consumer session timeout accepted",
        type=int,
        default=6000,
    )
    serving.env_flag(
        parser,
        "--max-partitions-per-topic",
        "SEGLOG_MAX_PARTITIONS_PER_TOPIC",
        "the most partitions one topic may have",
        type=int,
        default=DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    )
    serving.env_flag(
        parser,
        "--max-partitions",
        "SEGLOG_MAX_PARTITIONS",
        "the most partitions the whole cluster may have",
        type=int,
        default=DEFAULT_MAX_PARTITIONS,
    )
    serving.env_flag(
        parser,
        "--max-unacknowledged-bytes",
        "SEGLOG_MAX_UNACKNOWLEDGED_BYTES",
        "acks=0 produce bytes held while their nodes have not answered; past it, back off",
        type=int,
        default=DEFAULT_MAX_UNACKNOWLEDGED_BYTES,
    )
    serving.env_flag(
        parser,
        "--offsets-retention-minutes",
        "SEGLOG_OFFSETS_RETENTION_MINUTES",
        "committed offsets of empty groups are deleted after this long (Kafka's default)",
        type=int,
        default=DEFAULT_OFFSETS_RETENTION_MINUTES,
    )
    serving.env_flag(
        parser,
        "--offsets-retention-check-interval-ms",
        "SEGLOG_OFFSETS_RETENTION_CHECK_INTERVAL_MS",
        "how often expired committed offsets are looked for",
        type=int,
        default=DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    )
    serving.env_flag(
        parser,
        "--default-replication-factor",
        "SEGLOG_DEFAULT_REPLICATION_FACTOR",
        "replicas of a topic created without a replication factor",
        type=int,
        default=DEFAULT_REPLICATION_FACTOR,
    )
    serving.env_flag(
        parser,
        "--offsets-topic-replication-factor",
        "SEGLOG_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "replicas of __consumer_offsets (fewer when fewer nodes are live at its creation)",
        type=int,
        default=3,
    )
    serving.env_flag(
        parser,
        "--auto-leader-rebalance-enable",
        "SEGLOG_AUTO_LEADER_REBALANCE_ENABLE",
        "give leadership back to each partition's preferred replica (true/false)",
        default="true",
        choices=["true", "false"],
    )
    serving.env_flag(
        parser,
        "--leader-imbalance-check-interval-seconds",
        "SEGLOG_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS",
        "how often preferred leaders are restored",
        type=int,
        default=300,
    )
    serving.env_flag(
        parser,
        "--cluster-secret",
        grants.CLUSTER_SECRET_ENV,
        "secret shared with the nodes to sign bulk transfer grants (16+ characters); "
        "without it the bulk fetch path is off",
    )
    serving.env_flag(
        parser,
        "--fetch-grant-ttl-ms",
        "SEGLOG_FETCH_GRANT_TTL_MS",
        "how long a bulk transfer grant stays valid",
        type=int,
        default=grants.DEFAULT_GRANT_TTL_MS,
    )
    serving.env_flag(parser, "--tls-cert", "SEGLOG_TLS_CERT", "PEM certificate (gateway)")
    serving.env_flag(parser, "--tls-key", "SEGLOG_TLS_KEY", "PEM private key")
    serving.env_flag(
        parser,
        "--tls-ca",
        "SEGLOG_TLS_CA",
        "PEM cluster CA: every caller (nodes: node-<id>) presents a certificate from it",
    )
    serving.env_flag(
        parser,
        "--tls-client-auth",
        "SEGLOG_TLS_CLIENT_AUTH",
        "required: clients present certificates; none: they use bearer tokens, and nodes "
        "call the --internal-listen address",
        default="required",
        choices=["required", "none"],
    )
    serving.env_flag(
        parser, "--internal-listen", "SEGLOG_INTERNAL_LISTEN", "the nodes' listener (mutual TLS)"
    )
    serving.env_flag(
        parser,
        "--tls-node-identity-prefix",
        "SEGLOG_TLS_NODE_IDENTITY_PREFIX",
        "nodes' certificates name them <prefix><id>: only that certificate claims the id",
        default=NODE_IDENTITY_PREFIX,
    )
    serving.env_flag(
        parser, "--oauth-jwks-file", "SEGLOG_OAUTH_JWKS_FILE", "JWT key set for bearer tokens"
    )
    serving.env_flag(parser, "--oauth-audience", "SEGLOG_OAUTH_AUDIENCE", "required JWT audience")
    serving.env_flag(
        parser, "--token-file", "SEGLOG_TOKEN_FILE", "static bearer tokens: '<token> <name>' lines"
    )
    serving.env_flag(
        parser,
        "--ssl-principal-mapping-rules",
        "SEGLOG_SSL_PRINCIPAL_MAPPING_RULES",
        "Kafka's RULE:pattern/replacement/[LU],...,DEFAULT over the certificate's subject DN "
        "(default: its CN)",
        default="",
    )
    serving.env_flag(
        parser,
        "--authorizer",
        "SEGLOG_AUTHORIZER",
        "check every call against the ACLs (Kafka's authorizer; true/false)",
        default="false",
        choices=["true", "false"],
    )
    serving.env_flag(
        parser,
        "--super-users",
        "SEGLOG_SUPER_USERS",
        "principals allowed everything, ';'-separated (Kafka's super.users: User:admin)",
        default="",
    )
    serving.env_flag(
        parser,
        "--allow-everyone-if-no-acl-found",
        "SEGLOG_ALLOW_EVERYONE_IF_NO_ACL_FOUND",
        "a resource no ACL names is open to all (true/false)",
        default="false",
        choices=["true", "false"],
    )
    serving.add_health_listen_flag(parser)
    serving.add_config_file_flag(parser)
    args = parser.parse_args(serving.config_file_flags(argv, parser))
    try:
        secret = grants.cluster_secret(args.cluster_secret)
        tls = TlsFiles.from_flags(args.tls_cert, args.tls_key, args.tls_ca)
    except ValueError as exc:
        parser.error(str(exc))
    return GatewayConfig(
        listen=args.listen,
        data_dir=Path(args.data_dir),
        session_timeout_ms=int(args.session_timeout_ms),
        heartbeat_interval_ms=int(args.heartbeat_interval_ms),
        offsets_topic_num_partitions=int(args.offsets_topic_num_partitions),
        group_initial_rebalance_delay_ms=int(args.group_initial_rebalance_delay_ms),
        group_min_session_timeout_ms=int(args.group_min_session_timeout_ms),
        max_partitions_per_topic=int(args.max_partitions_per_topic),
        max_partitions=int(args.max_partitions),
        max_unacknowledged_bytes=int(args.max_unacknowledged_bytes),
        offsets_retention_minutes=int(args.offsets_retention_minutes),
        offsets_retention_check_interval_ms=int(args.offsets_retention_check_interval_ms),
        default_replication_factor=int(args.default_replication_factor),
        offsets_topic_replication_factor=int(args.offsets_topic_replication_factor),
        auto_leader_rebalance_enable=args.auto_leader_rebalance_enable == "true",
        leader_imbalance_check_interval_seconds=int(args.leader_imbalance_check_interval_seconds),
        cluster_secret=secret,
        fetch_grant_ttl_ms=int(args.fetch_grant_ttl_ms),
        tls=tls,
        tls_client_auth=args.tls_client_auth,
        internal_listen=args.internal_listen,
        node_identity_prefix=args.tls_node_identity_prefix,
        health_listen=args.health_listen,
        registry_etcd=args.registry_etcd,
        registry_etcd_prefix=args.registry_etcd_prefix,
        advertised_listener=args.advertised_listener,
        gateway_session_timeout_ms=int(args.gateway_session_timeout_ms),
        tokens=TokenVerifier(
            Path(args.oauth_jwks_file) if args.oauth_jwks_file else None,
            Path(args.token_file) if args.token_file else None,
            args.oauth_audience,
        )
        if args.oauth_jwks_file or args.token_file
        else None,
        ssl_principal_mapping_rules=args.ssl_principal_mapping_rules,
        authorizer=args.authorizer == "true",
        super_users=tuple(u.strip() for u in args.super_users.split(";") if u.strip()),
        allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found == "true",
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return serving.run_until_signalled(
        "gateway",
        "seglog-gateway",
        lambda tracer, meter: Gateway(config, tracer_provider=tracer, meter_provider=meter),
    )


if __name__ == "__main__":
    sys.exit(main())
