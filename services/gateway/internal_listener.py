"""The control plane's own door (Kafka's separate control plane listener, KIP-291): storage
nodes register, heartbeat and alter partitions (the Registry service) on a gRPC server of
their own, never on the clients' listener.

On the clients' listener, a flood of client calls filled the request-memory pool
(queued.max.request.bytes) and gRPC's call limit (max.concurrent.requests): every node's
heartbeat was refused RESOURCE_EXHAUSTED and all the nodes fenced themselves until the flood
ended. Here nothing a client does can reach a node's call: its own server, its own threads,
its own call limit and message size, and no request-memory interceptor (a heartbeat is a few
hundred bytes; the clients' pool is theirs).

Security: plaintext when the gateway has no TLS; with TLS and the cluster CA, mutual TLS
whatever the clients' listener asks of clients (tls.client.auth), so only holders of the
CA's certificates reach it and each node claims only its own id (registry_service.py); with
TLS but no CA, server-side TLS only (nodes are not asked for certificates, as before).
"""

from __future__ import annotations

import grpc
from opentelemetry import trace

from seglog.security.tls import TlsFiles, server_credentials
from services import serving
from services.settings import GATEWAY_INTERNAL_PORT

# Registry calls are short (a heartbeat is an in-memory check and an answer of what changed;
# a registration or an ISR change one metadata record): a few threads serve hundreds of
# nodes heartbeating every 2 s. Eight leave room for calls waiting on etcd's round trips.
INTERNAL_THREADS = 8
# Each node has at most one heartbeat and a few AlterPartition calls in flight; past this
# many calls at once (running or queued) gRPC refuses more RESOURCE_EXHAUSTED before reading
# them, and the node's session retries a refused heartbeat after 0.1 s.
INTERNAL_MAX_CONCURRENT_CALLS = 64
# The largest node request: a heartbeat naming every partition of the cluster offline
# (max.partitions, 20,000, each with a topic of up to 249 bytes and a reason of a few
# hundred) is ~11 MiB; clients' requests may be 100 MiB (socket.request.max.bytes).
INTERNAL_MAX_REQUEST_BYTES = 16 * 1024 * 1024


def default_internal_listen(listen: str) -> str:
    """The clients' listener's host on GATEWAY_INTERNAL_PORT; port 0 (any free port) when
    the clients' listener's is 0, as tests start gateways."""
    host, port = listen.rsplit(":", 1)
    return f"{host}:{0 if int(port) == 0 else GATEWAY_INTERNAL_PORT}"


def build_peer_server(
    internal_listen: str,
    handler: grpc.GenericRpcHandler,
    service_name: str,
    *,
    tls: TlsFiles | None,
    advertised: str,
) -> tuple[grpc.Server, str]:
    """Other gateways' calls (about the share partitions this gateway holds:
    share/forwarding.py) on a server of their own, started, at the internal listener's host
    on any free port (published in the gateway's session), secured as the internal
    listener is; and its address as other gateways reach it (bound to any address: at the
    host of `advertised`, the gateway's advertised listener). Not on the nodes' server: a
    client's share fetch through another gateway drives these calls, and they must never
    take the threads nodes' heartbeats need."""
    host = internal_listen.rsplit(":", 1)[0]
    server, port = build_internal_server(f"{host}:0", [handler], [service_name], tls=tls)
    server.start()
    if host in ("0.0.0.0", "[::]", "::", ""):
        host = advertised.rsplit(":", 1)[0]
    return server, f"{host}:{port}"


def describe(tls: TlsFiles | None) -> str:
    """What the gateway logs of its internal listener, for operators."""
    security = "plaintext" if tls is None else "mutual TLS" if tls.ca is not None else "TLS"
    return (
        f"{security}; {INTERNAL_THREADS} threads, {INTERNAL_MAX_CONCURRENT_CALLS} calls at "
        f"once, requests up to {INTERNAL_MAX_REQUEST_BYTES} bytes, outside "
        f"queued.max.request.bytes"
    )


def internal_credentials(tls: TlsFiles | None) -> grpc.ServerCredentials | None:
    if tls is None:
        return None
    return server_credentials(tls, "required" if tls.ca is not None else "none")


def build_internal_server(
    listen: str,
    handlers: list[grpc.GenericRpcHandler],
    service_names: list[str],
    *,
    tls: TlsFiles | None,
    tracer_provider: trace.TracerProvider | None = None,
) -> tuple[grpc.Server, int]:
    """The nodes' server (not started) and its bound port."""
    try:
        server, _, port = serving.build_server(
            listen,
            handlers,
            service_names,
            max_workers=INTERNAL_THREADS,
            max_request_bytes=INTERNAL_MAX_REQUEST_BYTES,
            tracer_provider=tracer_provider,
            credentials=internal_credentials(tls),
            max_concurrent_rpcs=INTERNAL_MAX_CONCURRENT_CALLS,
            thread_name_prefix="registry",
        )
    except OSError as exc:
        raise OSError(
            f"the internal listener (storage nodes' registry calls): {exc}; choose its "
            f"address with --internal-listen HOST:PORT"
        ) from exc
    return server, port
