"""The storage node's own settings, each declared once (services/settings.py derives the
command line, properties files and the README's table from these fields). The engine's
settings (Kafka's log.*, the LogManager's, replica.*) are LogConfig, LogManagerConfig and
ReplicationSettings fields, given as `--config NAME=VALUE` and kept in `engine_configs`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from seglog.rpc import grants
from seglog.security.certs import NODE_IDENTITY_PREFIX
from seglog.security.tls import TlsFiles
from seglog.storage.remote_indexes import DEFAULT_INDEX_CACHE_BYTES
from seglog.storage.remote_store import RemoteStorageConfig
from services.memory_pool import DEFAULT_QUEUED_MAX_REQUEST_BYTES
from services.settings import (
    BROKER_HEARTBEAT_INTERVAL_MS,
    BROKER_SESSION_TIMEOUT_MS,
    Flag,
    required_setting,
    setting,
)

from .replica_manager import DEFAULT_CHUNK_BYTES


def _node_tls(cert: str | None, key: str | None, ca: str | None) -> TlsFiles | None:
    files = TlsFiles.from_flags(cert, key, ca)
    if files is not None and files.ca is None:
        raise ValueError("a node's TLS needs the cluster CA too (--tls-ca): its API is mutual TLS")
    return files


def _true_or_false_any_case(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return text.lower() == "true"


def _positive_bytes(text: str) -> int:
    value = int(text)
    if value < 1024 * 1024:
        raise ValueError(f"{value} bytes is below the 1 MiB a decompression step takes")
    return value


def _remote_storage(
    endpoint_url: str | None,
    bucket: str | None,
    access_key_id: str | None,
    secret_access_key: str | None,
    region: str | None,
    prefix: str | None,
) -> RemoteStorageConfig | None:
    """Tiered storage is on when an endpoint is given; it then needs the rest but region and
    prefix. The key pair is best given by environment (a Kubernetes Secret), not on a command
    line every process listing shows."""
    if not endpoint_url:
        if bucket or access_key_id or secret_access_key:
            raise ValueError("the remote log storage settings need --remote-log-storage-endpoint")
        return None
    missing = [
        flag
        for flag, value in (
            ("--remote-log-storage-bucket", bucket),
            ("--remote-log-storage-access-key-id", access_key_id),
            ("--remote-log-storage-secret-access-key", secret_access_key),
        )
        if not value
    ]
    if missing:
        raise ValueError(f"remote log storage at {endpoint_url} needs {', '.join(missing)}")
    assert bucket and access_key_id and secret_access_key
    return RemoteStorageConfig(
        endpoint_url=endpoint_url,
        bucket=bucket,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        region=region or "us-east-1",
        prefix=prefix or "",
    )


def _at_least(least: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise ValueError(f"must be at least {least}")
        return value

    return parse


def _milliseconds(text: str) -> int:
    if not text.isdigit():
        raise ValueError("must be a number of ms")
    return int(text)


@dataclass(frozen=True, kw_only=True)
class NodeConfig:
    node_id: int = required_setting("this node's id")
    listen: str = setting("127.0.0.1:0", "address to serve on")
    data_dir: Path = required_setting("the node's data dir")
    gateway: str | None = setting(
        None,
        "the gateway's internal listener (its --internal-listen; port 7090 unless given), "
        "several comma-separated for several gateways; never the clients' listener",
    )
    advertised_address: str | None = setting(
        None, "address the gateway should dial (default: the listen address and bound port)"
    )
    heartbeat_interval_ms: int = setting(
        BROKER_HEARTBEAT_INTERVAL_MS, "heartbeat period", name="broker.heartbeat.interval.ms"
    )
    # As the gateways have it: heartbeats unanswered this long fence the node
    # (registry_client.py). Given with the engine settings, as Kafka's broker settings are.
    session_timeout_ms: int = setting(
        BROKER_SESSION_TIMEOUT_MS,
        "as the gateways': heartbeats unanswered this long fence the node",
        name="broker.session.timeout.ms",
        flags=(),
        engine_config=True,
        parse=_milliseconds,
    )
    # Not a setting: the size of the chunks a fetch is streamed in.
    fetch_chunk_bytes: int = DEFAULT_CHUNK_BYTES
    # Kafka's controlled.shutdown.enable, and how long a stop waits for its leaderships to
    # move (Kafka waits up to 5 minutes; a planned restart here should not wait that long).
    controlled_shutdown_enable: bool = setting(
        True,
        "move this node's leaderships to other replicas before it stops",
        flags=(),
        engine_config=True,
        parse=_true_or_false_any_case,
    )
    controlled_shutdown_timeout_ms: int = setting(
        30_000,
        "how long a stop waits for its leaderships to move",
        flags=(),
        engine_config=True,
        parse=_milliseconds,
    )
    # The bulk fetch listener (bulk.md), on when the cluster secret is set: its address
    # (default: the listen host, any free port) and the address clients should dial.
    cluster_secret: bytes | None = setting(
        None,
        "secret shared with the gateway to verify bulk transfer grants (16+ characters); "
        "without it the bulk fetch path is off",
        parse=grants.cluster_secret,
        described=False,
        repr=False,
    )
    bulk_listen: str | None = setting(None, "bulk fetch address (default: any port)")
    advertised_bulk_address: str | None = setting(
        None, "bulk address clients should dial (default: the bound one)"
    )
    inflation_budget_bytes: int = setting(
        256 * 1024 * 1024,
        "memory for decompressing produced batches to check them, shared by every request "
        "at once (a batch that finds no room is refused as retriable)",
        parse=_positive_bytes,
    )
    queued_max_request_bytes: int = setting(
        DEFAULT_QUEUED_MAX_REQUEST_BYTES,
        "bytes of produce requests in flight on the bulk listener (producers' and the "
        "gateway's relay), read, appended or waiting for replication; past it a request "
        "waits, then is refused retriably and goes through the gateway (Kafka's default "
        "is -1, unbounded; -1 here too turns the bound off)",
    )
    bulk_first_request_timeout_ms: int = setting(
        10_000,
        "how long a new bulk connection has to send its first request whole before it is "
        "closed (a peer address holds at most 16 such connections at once)",
        parse=_milliseconds,
    )
    # TLS: the node's certificate (subject `node-<id>`, from the cluster CA) and the CA. Its
    # gRPC API then takes only mutual-TLS callers holding the gateway's certificate, or a
    # node's for what replication needs as that node (server.py); it dials the gateway and
    # its peers with its own.
    tls: TlsFiles | None = setting(
        None,
        "TLS files",
        name="security.protocol",
        flags=(
            Flag("--tls-cert", "PEM certificate (node-<id>)"),
            Flag("--tls-key", "PEM private key"),
            Flag("--tls-ca", "PEM cluster CA (mutual TLS)"),
        ),
        parse=_node_tls,
        show=lambda tls: "SSL" if tls is not None else "PLAINTEXT",
    )
    # The CN prefix of nodes' certificates (`node-`: node 3 holds `node-3`).
    node_identity_prefix: str = setting(
        NODE_IDENTITY_PREFIX,
        "nodes' certificates name them <prefix><id>",
        flag="--tls-node-identity-prefix",
    )
    # A plaintext listener for the health service alone (Kubernetes' probes speak no TLS).
    health_listen: str | None = setting(
        None, "a plaintext listener for the health service only (probes that cannot speak TLS)"
    )
    # Tiered storage (KIP-405): the object store the leaders copy rolled segments to
    # (remote_log_manager.py). Kafka's switch is remote.log.storage.system.enable; here the
    # store's endpoint turns it on.
    remote_storage: RemoteStorageConfig | None = setting(
        None,
        "the S3 object store for tiered storage (topics with remote.storage.enable=true)",
        name="remote.log.storage.system.enable",
        flags=(
            Flag("--remote-log-storage-endpoint", "S3 endpoint URL (turns tiered storage on)"),
            Flag("--remote-log-storage-bucket", "S3 bucket"),
            Flag("--remote-log-storage-access-key-id", "S3 access key id"),
            Flag("--remote-log-storage-secret-access-key", "S3 secret key (use the env)"),
            Flag("--remote-log-storage-region", "S3 region (default us-east-1)"),
            Flag("--remote-log-storage-prefix", "key prefix in the bucket"),
        ),
        parse=_remote_storage,
        show=lambda remote: "true" if remote is not None else "false",
    )
    remote_log_manager_task_interval_ms: int = setting(
        30_000,
        "how often the leaders copy rolled segments and apply remote retention",
        flags=(),
        engine_config=True,
        parse=_milliseconds,
    )
    remote_log_manager_task_retry_backoff_ms: int = setting(
        500,
        "the first wait after an object store error (doubling up to the max)",
        flags=(),
        engine_config=True,
        parse=_milliseconds,
    )
    remote_log_manager_task_retry_backoff_max_ms: int = setting(
        30_000,
        "the longest wait between retries while the object store fails",
        flags=(),
        engine_config=True,
        parse=_milliseconds,
    )
    # Reads below the local log start from the object store (remote_fetches.py), Kafka's
    # RemoteLogManagerConfig names and defaults.
    remote_log_reader_threads: int = setting(
        10,
        "threads reading tiered data from the object store for consumers' fetches",
        flags=(),
        engine_config=True,
        parse=_at_least(1),
    )
    remote_log_reader_max_pending_tasks: int = setting(
        100,
        "remote reads that may wait for a reader thread; past it a read answers "
        "KAFKA_STORAGE_ERROR (retriable) at once",
        flags=(),
        engine_config=True,
        parse=_at_least(0),
    )
    remote_fetch_max_wait_ms: int = setting(
        500,
        "how long a fetch waits for its remote read; past it the partition answers no "
        "records, and the consumer asks again",
        flags=(),
        engine_config=True,
        parse=_at_least(1),
    )
    remote_log_index_file_cache_total_size_bytes: int = setting(
        DEFAULT_INDEX_CACHE_BYTES,
        "memory for remote segments' offset and time indexes (an LRU)",
        flags=(),
        engine_config=True,
        parse=_at_least(1),
    )
    # Engine settings with Kafka's names: log.* / LogConfig fields for topic defaults,
    # LogManagerConfig fields for the node's background work, replica.* (server.py).
    engine_configs: Mapping[str, str] = field(default_factory=dict)
