"""The gateway's produce relay over the storage nodes' bulk listeners (bulk.md, version 3):
a client's produce crossed two gRPC hops (client to gateway, gateway to leader); the second
goes over kept TCP connections to the leader's bulk listener instead
(seglog.rpc.produce_connections has the pool and what happens when the node cannot take a
request). The relay signs its own grant per node (`produce_relay`, no partition: nothing a
client is ever given) and renews it before expiry (grants.ReusedGrants)."""

from __future__ import annotations

import ssl
from typing import Any, Protocol

from seglog.rpc import grants
from seglog.rpc.produce_connections import MAX_CONNECTIONS_PER_NODE, ProduceConnections
from seglog.security.tls import TlsFiles, client_ssl_context


class RelayConfig(Protocol):
    """The gateway's settings the relays are made from (GatewayConfig is one): named here,
    not imported, because the settings import this plane for its defaults."""

    @property
    def cluster_secret(self) -> bytes | None: ...
    @property
    def tls(self) -> TlsFiles | None: ...
    @property
    def fetch_grant_ttl_ms(self) -> int: ...
    @property
    def bulk_produce_relay_enable(self) -> bool: ...
    @property
    def bulk_fetch_relay_enable(self) -> bool: ...


def relay_settings(config: RelayConfig, *, traced: bool) -> dict[str, Any]:
    """What either relay (this one, fetch_relay.py) is made with: the cluster secret, the
    gateway's TLS client context, whether it traces, its grants' time to live."""
    assert config.cluster_secret is not None
    return {
        "secret": config.cluster_secret,
        "ssl_context": None if config.tls is None else client_ssl_context(config.tls),
        "traced": traced,
        "grant_ttl_ms": config.fetch_grant_ttl_ms,
    }


def configured_relay(config: RelayConfig, *, traced: bool) -> ProduceRelay | None:
    """The gateway's relay as configured: none without a cluster secret or with
    `bulk.produce.relay.enable` false."""
    if config.cluster_secret is None or not config.bulk_produce_relay_enable:
        return None
    return ProduceRelay(**relay_settings(config, traced=traced))


class ProduceRelay:
    def __init__(
        self,
        secret: bytes,
        *,
        ssl_context: ssl.SSLContext | None = None,
        traced: bool = False,
        grant_ttl_ms: int = grants.DEFAULT_GRANT_TTL_MS,
        max_connections_per_node: int = MAX_CONNECTIONS_PER_NODE,
    ) -> None:
        self.grants = grants.RelayGrants(secret, ttl_ms=grant_ttl_ms, produce_relay=True)
        self.connections = ProduceConnections(
            ssl_context=ssl_context,
            traced=traced,
            max_connections_per_node=max_connections_per_node,
        )

    def relay(self, node_id: int, address: str, request: bytes, timeout_s: float) -> bytes | None:
        """The node's answer to the ProduceRequest `request` (its wire bytes), or None when
        the bulk path could not take it and nothing was sent (the caller uses gRPC).
        SeglogError: the node refused the request as a whole, or the connection failed
        after it was sent."""
        if not address:
            return None
        return self.connections.send(node_id, address, self.grants.get(node_id), request, timeout_s)

    def close(self) -> None:
        self.connections.close()
