"""What the registry keeps its metadata and node sessions in: its own files (none of these),
or etcd when the gateway is given one (several gateways then share the registry)."""

from __future__ import annotations

from typing import NamedTuple

from .cluster.metadata_etcd_store import EtcdMetadataStore
from .coordination.etcd_keyspace import EtcdKeyspace
from .coordination.node_sessions import EtcdNodeSessions
from .settings import GatewayConfig


class RegistryBacking(NamedTuple):
    keyspace: EtcdKeyspace | None
    store: EtcdMetadataStore | None
    sessions: EtcdNodeSessions | None


def registry_backing(config: GatewayConfig) -> RegistryBacking:
    if config.registry_etcd is None:
        return RegistryBacking(None, None, None)
    keyspace = EtcdKeyspace(
        config.registry_etcd,
        config.registry_etcd_prefix,
        tls=config.registry_etcd_tls,
        user=config.registry_etcd_user,
        password=config.registry_etcd_password,
    )
    return RegistryBacking(
        keyspace,
        EtcdMetadataStore(keyspace),
        EtcdNodeSessions(keyspace, config.session_timeout_ms),
    )
