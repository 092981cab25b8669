"""Run a storage node: python -m services.storage_node --node-id N --data-dir DIR ... (--help)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seglog.rpc import grants
from seglog.security.certs import NODE_IDENTITY_PREFIX
from seglog.security.tls import TlsFiles
from services import serving

from .server import NodeConfig, StorageNode


def parse_args(argv: list[str] | None = None) -> NodeConfig:
    parser = argparse.ArgumentParser(prog="python -m services.storage_node")
    serving.env_flag(
        parser, "--node-id", "SEGLOG_NODE_ID", "this node's id", type=int, required=True
    )
    serving.env_flag(
        parser, "--listen", "SEGLOG_LISTEN", "address to serve on", default="127.0.0.1:0"
    )
    serving.env_flag(parser, "--data-dir", "SEGLOG_DATA_DIR", "the node's data dir", required=True)
    serving.env_flag(parser, "--gateway", "SEGLOG_GATEWAY", "the gateway's registry address")
    serving.env_flag(
        parser,
        "--advertised-address",
        "SEGLOG_ADVERTISED_ADDRESS",
        "address the gateway should dial (default: the listen address and bound port)",
    )
    serving.env_flag(
        parser,
        "--heartbeat-interval-ms",
        "SEGLOG_HEARTBEAT_INTERVAL_MS",
        "heartbeat period",
        type=int,
        default=2000,
    )
    serving.env_flag(
        parser,
        "--cluster-secret",
        grants.CLUSTER_SECRET_ENV,
        "secret shared with the gateway to verify bulk transfer grants (16+ characters); "
        "without it the bulk fetch path is off",
    )
    serving.env_flag(
        parser, "--bulk-listen", "SEGLOG_BULK_LISTEN", "bulk fetch address (default: any port)"
    )
    serving.env_flag(
        parser,
        "--advertised-bulk-address",
        "SEGLOG_ADVERTISED_BULK_ADDRESS",
        "bulk address clients should dial (default: the bound one)",
    )
    serving.env_flag(parser, "--tls-cert", "SEGLOG_TLS_CERT", "PEM certificate (node-<id>)")
    serving.env_flag(parser, "--tls-key", "SEGLOG_TLS_KEY", "PEM private key")
    serving.env_flag(parser, "--tls-ca", "SEGLOG_TLS_CA", "PEM cluster CA (mutual TLS)")
    serving.env_flag(
        parser,
        "--tls-node-identity-prefix",
        "SEGLOG_TLS_NODE_IDENTITY_PREFIX",
        "nodes' certificates name them <prefix><id>",
        default=NODE_IDENTITY_PREFIX,
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="engine setting with Kafka's name, e.g. log.segment.bytes=1048576 or "
        "retention.check.interval.ms=1000, replica.lag.time.max.ms=10000, "
        "controlled.shutdown.enable=false, broker.session.timeout.ms=9000 (as the gateways': "
        "heartbeats unanswered this long fence the node) (repeatable)",
    )
    serving.add_health_listen_flag(parser)
    serving.add_config_file_flag(parser)
    args = parser.parse_args(serving.config_file_flags(argv, parser, others="--config"))
    engine_configs = {}
    for item in args.config:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--config {item!r}: expected NAME=VALUE")
        engine_configs[name] = value
    shutdown_enable = engine_configs.pop("controlled.shutdown.enable", "true").lower()
    if shutdown_enable not in ("true", "false"):
        parser.error("--config controlled.shutdown.enable must be true or false")
    shutdown_timeout_ms = engine_configs.pop("controlled.shutdown.timeout.ms", "30000")
    if not shutdown_timeout_ms.isdigit():
        parser.error("--config controlled.shutdown.timeout.ms must be a number of ms")
    session_timeout_ms = engine_configs.pop("broker.session.timeout.ms", "9000")
    if not session_timeout_ms.isdigit():
        parser.error("--config broker.session.timeout.ms must be a number of ms")
    return NodeConfig(
        node_id=int(args.node_id),
        listen=args.listen,
        data_dir=Path(args.data_dir),
        gateway=args.gateway,
        advertised_address=args.advertised_address,
        heartbeat_interval_ms=int(args.heartbeat_interval_ms),
        session_timeout_ms=int(session_timeout_ms),
        engine_configs=engine_configs,
        controlled_shutdown_enable=shutdown_enable == "true",
        controlled_shutdown_timeout_ms=int(shutdown_timeout_ms),
        cluster_secret=_secret(parser, args.cluster_secret),
        tls=_tls(parser, args),
        node_identity_prefix=args.tls_node_identity_prefix,
        health_listen=args.health_listen,
        bulk_listen=args.bulk_listen,
        advertised_bulk_address=args.advertised_bulk_address,
    )


def _tls(parser: argparse.ArgumentParser, args: argparse.Namespace) -> TlsFiles | None:
    try:
        files = TlsFiles.from_flags(args.tls_cert, args.tls_key, args.tls_ca)
    except ValueError as exc:
        parser.error(str(exc))
    if files is not None and files.ca is None:
        parser.error("a node's TLS needs the cluster CA too (--tls-ca): its API is mutual TLS")
    return files


def _secret(parser: argparse.ArgumentParser, value: str | None) -> bytes | None:
    try:
        return grants.cluster_secret(value)
    except ValueError as exc:
        parser.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return serving.run_until_signalled(
        f"storage node {config.node_id}",
        f"seglog-storage-node-{config.node_id}",
        lambda tracer, meter: StorageNode(config, tracer_provider=tracer, meter_provider=meter),
    )


if __name__ == "__main__":
    sys.exit(main())
