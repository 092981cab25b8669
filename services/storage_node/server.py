"""Assembles a storage node: LogManager, the ReplicaManager over it, the StorageNode
servicer, health, reflection, tracing, and the registry session with the gateway."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import grpc
from grpc_health.v1.health import HealthServicer
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider

from seglog.errors import InvalidConfigError, PermissionDeniedError
from seglog.records.inflation_budget import PROCESS_BUDGET, return_large_buffers_to_the_system
from seglog.rpc import wire
from seglog.rpc.status import abort
from seglog.security.certs import GATEWAY_IDENTITY, node_id_of
from seglog.security.tls import peer_identity, server_credentials
from seglog.storage import LogConfig, LogManagerConfig
from seglog.storage.log_manager import LogManager
from seglog.storage.remote_metadata import RemoteLogMetadata
from seglog.storage.remote_store import RemoteStorageConfig, RemoteStore
from seglog.v1 import common_pb2, gateway_pb2, storage_pb2
from services import serving
from services.memory_pool import RequestMemoryPool

from .bulk_server import BulkServer
from .cluster_identity import ClusterIdentity
from .metadata_applier import MetadataApplier
from .node_metrics import NodeMetrics
from .readiness import InSyncReadiness
from .registry_client import STARTING_FENCE, RegistrySession
from .remote_fetches import RemoteFetches, RemoteReadSettings
from .remote_log_manager import RemoteLogManager, RemoteLogManagerConfig
from .replica_fetcher import FetcherSettings
from .replica_manager import ReplicaManager, ReplicationSettings
from .service import FETCH_METHOD, FETCH_POOL_THREADS, StorageNodeService
from .settings import NodeConfig

logger = logging.getLogger(__name__)
# Connections to the object store beside the reader threads' own: the remote log manager's
# copies and metadata, a follower's catch-up from the store.
STORE_CONNECTIONS_BESIDE_READERS = 4
SERVICE_NAME = storage_pb2.DESCRIPTOR.services_by_name["StorageNode"].full_name


def split_engine_configs(configs: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Kafka broker names (`log.retention.ms`, `log.segment.bytes`) and plain topic names go
    to the default LogConfig; the rest (but `replica.*`, see replication_settings) must be
    LogManagerConfig fields."""
    log_fields = set(LogConfig.__dataclass_fields__)
    log_overrides, manager_overrides = {}, {}
    for key, value in configs.items():
        name = key.removeprefix("log.").replace(".", "_")
        if name in log_fields or name in ("segment_index_bytes",):
            log_overrides[key.removeprefix("log.")] = value
        elif name not in _REPLICATION_FIELDS:
            manager_overrides[key] = value
    return log_overrides, manager_overrides


_FETCHER_FIELDS = set(FetcherSettings.__dataclass_fields__)
_REPLICATION_FIELDS = _FETCHER_FIELDS | {"replica_lag_time_max_ms"}


def replication_settings(configs: Mapping[str, str]) -> ReplicationSettings:
    """Kafka's replica.lag.time.max.ms and replica.fetch.* settings from --config."""
    fetcher: dict[str, int] = {}
    top: dict[str, int] = {}
    for key, value in configs.items():
        name = key.replace(".", "_")
        if name not in _REPLICATION_FIELDS:
            continue
        number = int(value)
        if number < (0 if name == "replica_fetch_wait_max_ms" else 1):
            raise InvalidConfigError(f"{key} must be positive, got {value}")
        (fetcher if name in _FETCHER_FIELDS else top)[name] = number
    return ReplicationSettings(fetcher=FetcherSettings(**fetcher), **top)


class StorageNode:
    def __init__(
        self,
        config: NodeConfig,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.config = config
        log_overrides, manager_overrides = split_engine_configs(config.engine_configs)
        default_log_config = LogConfig().with_overrides(log_overrides)
        manager_config = LogManagerConfig.from_overrides((str(config.data_dir),), manager_overrides)
        self.logs = LogManager(manager_config, default_log_config)
        self.replicas = ReplicaManager(
            self.logs,
            node_id=config.node_id,
            chunk_bytes=config.fetch_chunk_bytes,
            replication=replication_settings(config.engine_configs),
        )
        self.replicas.tls = config.tls
        # The data directory's cluster (meta.properties), read at start.
        self.identity = ClusterIdentity(config.data_dir, config.node_id)
        # Set when a registry of another cluster refused this node (`_refused`).
        self.fatal = threading.Event()
        self.failure = ""
        # Applies the registry's partition states (answers and pushes) on its own thread.
        self.applier = MetadataApplier(self.replicas, identity=self.identity)
        self.metrics = NodeMetrics(meter_provider, self.replicas, self.applier)
        self.service = StorageNodeService(self.replicas, self.applier, metrics=self.metrics)
        self.tracer_provider = tracer_provider
        self.server: grpc.Server | None = None
        self.health: HealthServicer | None = None
        self.health_server: grpc.Server | None = None
        self.health_port = 0
        self.readiness: InSyncReadiness | None = None
        self.port = 0
        self.session: RegistrySession | None = None
        self.bulk: BulkServer | None = None
        self.remote_log_manager: RemoteLogManager | None = None
        if config.remote_storage is not None:
            self.remote_log_manager = RemoteLogManager(
                self.replicas,
                _pool_for_readers(config.remote_storage, config.remote_log_reader_threads),
                RemoteLogManagerConfig(
                    remote_log_manager_task_interval_ms=config.remote_log_manager_task_interval_ms,
                    remote_log_manager_task_retry_backoff_ms=(
                        config.remote_log_manager_task_retry_backoff_ms
                    ),
                    remote_log_manager_task_retry_backoff_max_ms=(
                        config.remote_log_manager_task_retry_backoff_max_ms
                    ),
                ),
                state_dir=config.data_dir,
            )
            self.replicas.remote_deletions = self.remote_log_manager.delete_partition_data
            # Reads below the local log start go to the same store, through the copier's
            # metadata (its writes update the cache readers use).
            self.read_remote(self.remote_log_manager.store, self.remote_log_manager.metadata)

    def read_remote(self, store: RemoteStore, metadata: RemoteLogMetadata) -> RemoteFetches:
        """Serve reads below the local log start from this object store (tiered storage):
        consumers' fetches and ListOffsets, with the remote.log.reader.* / remote.fetch.*
        settings (remote_fetches.py); and start a tiered partition this node
        follows from the store's state when its leader's log starts past it
        (tiered_catch_up.py)."""
        c = self.config
        settings = RemoteReadSettings(
            remote_log_reader_threads=c.remote_log_reader_threads,
            remote_log_reader_max_pending_tasks=c.remote_log_reader_max_pending_tasks,
            remote_fetch_max_wait_ms=c.remote_fetch_max_wait_ms,
            remote_log_index_file_cache_total_size_bytes=(
                c.remote_log_index_file_cache_total_size_bytes
            ),
        )
        remote = RemoteFetches(store, metadata, self.logs.topic_id, settings)
        self.replicas.remote = remote
        self.replicas.follower_fetchers.use_remote(remote)
        return remote

    @property
    def address(self) -> str:
        if self.config.advertised_address:
            return self.config.advertised_address
        host = self.config.listen.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    def _handlers(self) -> grpc.GenericRpcHandler:
        s = self.service
        guard = self._cluster_only if self.config.tls is not None else _unguarded
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                # Taken as wire bytes: service.py scans them (seglog.rpc.wire) instead of
                # parsing a message around the records.
                "Append": grpc.unary_unary_rpc_method_handler(
                    guard(s.Append),
                    request_deserializer=wire.identity,
                    response_serializer=common_pb2.ProduceResponse.SerializeToString,
                ),
                "Fetch": grpc.unary_stream_rpc_method_handler(
                    guard(s.Fetch),
                    request_deserializer=common_pb2.FetchRequest.FromString,
                    response_serializer=wire.identity,
                ),
                "ListOffsets": serving.unary(
                    guard(s.ListOffsets),
                    common_pb2.ListOffsetsRequest,
                    common_pb2.ListOffsetsResponse,
                ),
                "SplitPoints": serving.unary(
                    guard(s.SplitPoints),
                    common_pb2.SplitPointsRequest,
                    common_pb2.SplitPointsResponse,
                ),
                "DeleteRecords": serving.unary(
                    guard(s.DeleteRecords),
                    common_pb2.DeleteRecordsRequest,
                    common_pb2.DeleteRecordsResponse,
                ),
                "UpdatePartitions": serving.unary(
                    guard(s.UpdatePartitions),
                    gateway_pb2.NodeAssignment,
                    storage_pb2.UpdatePartitionsResponse,
                ),
                "DeletePartition": serving.unary(
                    guard(s.DeletePartition),
                    storage_pb2.DeletePartitionRequest,
                    storage_pb2.DeletePartitionResponse,
                ),
                "DescribePartitions": serving.unary(
                    guard(s.DescribePartitions),
                    storage_pb2.DescribePartitionsRequest,
                    storage_pb2.DescribePartitionsResponse,
                ),
                "DescribeProducers": serving.unary(
                    guard(s.DescribeProducers),
                    storage_pb2.DescribeProducersRequest,
                    storage_pb2.DescribeProducersResponse,
                ),
                "WriteTxnMarkers": serving.unary(
                    guard(s.WriteTxnMarkers),
                    storage_pb2.WriteTxnMarkersRequest,
                    storage_pb2.WriteTxnMarkersResponse,
                ),
            },
        )

    def _cluster_only(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """The storage-node API serves the gateway and peer nodes only, each as itself: the
        gateway (the controller, and the relay of clients' calls) may call every method; a
        node may only describe partitions and fetch as the replica its certificate names —
        so one node's certificate can neither delete another's partitions nor count as its
        progress toward the high watermark. Refused before the method runs."""
        name = method.__name__

        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            identity = peer_identity(context)
            if identity != GATEWAY_IDENTITY:
                refusal = self._node_refusal(name, identity, request)
                if refusal is not None:
                    abort(context, PermissionDeniedError(refusal))
            return method(request, context)

        return guarded

    def _node_refusal(self, method_name: str, identity: str | None, request: Any) -> str | None:
        """Why a caller other than the gateway may not make this call, or None if it may."""
        node_id = node_id_of(identity or "", self.config.node_identity_prefix)
        if node_id is None:
            return (
                f"the storage-node API serves the gateway and nodes only, not "
                f"{identity or 'a caller without a certificate'}"
            )
        if method_name == "DescribePartitions":
            return None
        if method_name == "Fetch":
            claimed = request.replica_id if request.HasField("replica_id") else None
            if claimed == node_id:
                return None
            return f"{identity} may fetch only as replica {node_id}, not as {claimed}"
        return f"{method_name} serves the gateway only, not {identity}"

    @property
    def bulk_address(self) -> str:
        if self.bulk is None:
            return ""
        return self.config.advertised_bulk_address or self.bulk.address

    def start(self) -> None:
        # The API listens from the start, its health NOT_SERVING while the logs load (a
        # large data dir takes a while: Kubernetes' startup probe sees a live process).
        credentials = None
        if self.config.tls is not None:
            credentials = server_credentials(self.config.tls, "required")
        self.server, self.health, self.port = serving.build_server(
            self.config.listen,
            [self._handlers()],
            [SERVICE_NAME],
            tracer_provider=self.tracer_provider,
            credentials=credentials,
            serving=False,
            method_threads={FETCH_METHOD: FETCH_POOL_THREADS},
        )
        self.server.start()
        if self.config.health_listen:
            self.health_server, self.health_port = serving.health_server(
                self.config.health_listen, self.health
            )
        try:
            if self.config.gateway:
                self.identity.load()  # before any log: a wrong directory stops here
            self.logs.startup()
        except BaseException:
            self.server.stop(0)
            if self.health_server is not None:
                self.health_server.stop(0)
            raise
        if self.config.gateway:
            # Until the registry has answered, any push or leadership this process holds may
            # be its previous life's: a restarted node whose log was cut at recovery must not
            # lead on a stale push naming it leader. The first answered heartbeat unfences.
            self.replicas.fence(STARTING_FENCE)
        PROCESS_BUDGET.limit_bytes = self.config.inflation_budget_bytes
        return_large_buffers_to_the_system()
        self.replicas.start()
        self.applier.start()
        if self.remote_log_manager is not None:
            self.remote_log_manager.start()
        if self.config.cluster_secret is not None:
            listen = self.config.bulk_listen or f"{self.config.listen.rsplit(':', 1)[0]}:0"
            self.bulk = BulkServer(
                listen,
                self.replicas,
                self.config.node_id,
                self.config.cluster_secret,
                first_request_timeout_ms=self.config.bulk_first_request_timeout_ms,
                request_memory=RequestMemoryPool(
                    self.config.queued_max_request_bytes, owner=f"node {self.config.node_id}"
                ),
                tls=self.config.tls,
                node_identity_prefix=self.config.node_identity_prefix,
                metrics=self.metrics,
                acl_narrowings=self.applier.acl_narrowings,
            )
            self.bulk.start()
            self.replicas.cluster_secret = self.config.cluster_secret
        else:
            logger.warning(
                "no cluster secret (SEGLOG_CLUSTER_SECRET): the bulk fetch path is off, "
                "consumers and followers fetch over gRPC"
            )
        serving.set_serving(self.health, [SERVICE_NAME], True)
        logger.info(
            "storage node %d serving on %s (%d partitions)",
            self.config.node_id,
            self.address,
            len(self.logs.logs()),
        )
        if self.config.gateway:
            self.session = RegistrySession(
                self.config.gateway,
                self.config.node_id,
                self.address,
                self.replicas,
                self.applier,
                heartbeat_interval_ms=self.config.heartbeat_interval_ms,
                session_timeout_ms=self.config.session_timeout_ms,
                tracer_provider=self.tracer_provider,
                log_config_defaults=split_engine_configs(self.config.engine_configs)[0],
                bulk_address=self.bulk_address,
                tls=self.config.tls,
                unclean_shutdown=not self.logs.started_after_clean_shutdown,
                identity=self.identity,
                on_refused=self._refused,
                on_misdirected=serving.stop_process,
            )
            self.session.start()
        session = self.session
        assert self.health is not None
        self.readiness = InSyncReadiness(
            self.health,
            self.replicas,
            self.config.node_id,
            (lambda: session.registered.is_set()) if session is not None else (lambda: True),
            self.config.heartbeat_interval_ms / 1000,
            metadata_version=lambda: self.applier.applied_offset,
        )
        self.readiness.start()

    def _refused(self, reason: str) -> None:
        """A registry of another cluster refused this node: the process stops, exit code
        1 (services/serving.py), its data untouched."""
        self.failure = reason
        self.fatal.set()
        serving.stop_process(reason)

    def stop(self, grace_s: float = 10.0, *, controlled: bool | None = None) -> None:
        """Stop accepting calls, let in-flight ones finish, then flush and close every log
        (which writes the clean-shutdown marker). With a registry, leaderships move to other
        in-sync replicas first (controlled shutdown), so acks=all producers barely pause."""
        if controlled is None:
            controlled = self.config.controlled_shutdown_enable
        if self.readiness is not None:
            self.readiness.stop()
        if self.health is not None:  # draining: no longer ready for new work
            serving.set_serving(self.health, [SERVICE_NAME], False)
        if self.session is not None:
            registered = self.session.registered.is_set() and self.session.refusal is None
            if (
                controlled
                and registered
                and not self.session.controlled_shutdown(
                    self.config.controlled_shutdown_timeout_ms / 1000
                )
            ):
                logger.warning("controlled shutdown did not finish: stopping anyway")
            self.session.stop()
        if self.bulk is not None:
            self.bulk.stop()
        if self.remote_log_manager is not None:
            self.remote_log_manager.stop()  # before the logs close under its copies
        self.applier.stop()
        if self.server is not None:
            self.replicas.stop()
            self.server.stop(grace_s).wait()
        if self.replicas.remote is not None:
            self.replicas.remote.close()
        if self.health_server is not None:
            self.health_server.stop(0)
        self.logs.shutdown()


def _unguarded(method: Callable[..., Any]) -> Callable[..., Any]:
    return method


def _pool_for_readers(storage: RemoteStorageConfig, reader_threads: int) -> RemoteStorageConfig:
    """The store's connection pool sized so that every reader thread has its connection
    beside the remote log manager's and a follower's catch-up: a GET waiting for a free
    connection would wait behind another GET."""
    wanted = reader_threads + STORE_CONNECTIONS_BESIDE_READERS
    if storage.max_pool_connections >= wanted:
        return storage
    return dataclasses.replace(storage, max_pool_connections=wanted)
