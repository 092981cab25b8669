"""Channels to seglog servers, with the options every caller needs."""

from __future__ import annotations

import socket
from typing import Any

import grpc
from opentelemetry import trace

from .. import tracing
from .client_id import with_client_id

# Kafka's socket.request.max.bytes: the largest request a seglog server accepts.
MAX_REQUEST_BYTES = 100 * 1024 * 1024
RECONNECT_BACKOFF_MS = 50
RECONNECT_BACKOFF_MAX_MS = 1000
# Kafka's socket.connection.setup.timeout.ms: how long one connection attempt may take.
CONNECTION_SETUP_TIMEOUT_MS = 10_000


def channel_options() -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", -1),
        ("grpc.max_send_message_length", MAX_REQUEST_BYTES),
        # One connection per target per process: do not share subchannels across channels
        # created for the same address, so closing one cannot disturb another.
        ("grpc.use_local_subchannel_pool", 1),
        # Kafka's reconnect.backoff.ms and reconnect.backoff.max.ms. gRPC's own start at 1 s
        # and grow to 120 s, so a server back after a long outage stayed unreachable through
        # this channel for up to two minutes, each call failing at once meanwhile.
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
        # gRPC takes its "min reconnect backoff" as the time a connection attempt is given
        # to finish the HTTP/2 handshake. At the backoff's 50 ms, a busy server that was
        # slow to send its SETTINGS failed every call at once (UNAVAILABLE).
        ("grpc.min_reconnect_backoff_ms", CONNECTION_SETUP_TIMEOUT_MS),
    ]


def channel_target(addresses: str, default_port: int) -> str:
    """gRPC's target for one address (`host[:port]`, the default port added) or for several
    comma-separated ones (Kafka's bootstrap.servers): each host resolved once to its
    addresses, all in one `ipv4:`/`ipv6:` target, which gRPC's pick_first policy tries in
    order — and tries again, in order, when the connection it made fails or drops, so calls
    fail over to the next server (the calls in flight fail, retriable)."""
    parts = [part.strip() for part in addresses.split(",") if part.strip()]
    if not parts:
        raise ValueError("no address given")
    if len(parts) == 1:
        return _with_port(parts[0], default_port)
    v4: list[str] = []
    v6: list[str] = []
    for part in parts:
        host, port = _with_port(part, default_port).rsplit(":", 1)
        host = host.strip("[]")
        try:
            found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except socket.gaierror:
            continue  # another address may still answer
        for family, _, _, _, sockaddr in found:
            if family == socket.AF_INET and f"{sockaddr[0]}:{port}" not in v4:
                v4.append(f"{sockaddr[0]}:{port}")
            elif family == socket.AF_INET6 and f"[{sockaddr[0]}]:{port}" not in v6:
                v6.append(f"[{sockaddr[0]}]:{port}")
    if v4:
        return "ipv4:" + ",".join(v4)
    if v6:
        return "ipv6:" + ",".join(v6)
    raise ValueError(f"none of {addresses!r} resolves to an address")


def tls_server_name(addresses: str) -> str | None:
    """The name to check servers' certificates against when several comma-separated
    addresses share one target: the first one's host, as given. (The combined target is a list
    of resolved addresses, whose text would otherwise be taken as the host name and match no
    certificate.) None for a single address: gRPC checks its own host."""
    parts = [part.strip() for part in addresses.split(",") if part.strip()]
    if len(parts) < 2:
        return None
    first = parts[0]
    if first.startswith("["):
        return first[1:].split("]", 1)[0]
    return first.rsplit(":", 1)[0] if ":" in first else first


def _with_port(address: str, default_port: int) -> str:
    """`host` -> `host:<default_port>` (gRPC would otherwise try 443); `host:port`,
    `[v6]:port` and scheme-prefixed targets (`unix:`, `dns:`, ...) stay as they are."""
    if address.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return address
    if address.startswith("["):
        return address if "]:" in address else f"{address}:{default_port}"
    return address if ":" in address else f"{address}:{default_port}"


def open_channel(
    address: str,
    *,
    traced: bool = False,
    tracer_provider: trace.TracerProvider | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    server_name: str | None = None,
    client_id: str | None = None,
) -> grpc.Channel:
    """A channel to a seglog server; TLS when `credentials` are given (security/tls.py),
    checking certificates against `server_name` when given (`tls_server_name`); every call
    labelled with `client_id` when given (client_id.py)."""
    if credentials is not None:
        options = channel_options()
        if server_name is not None:
            options.append(("grpc.ssl_target_name_override", server_name))
        channel = grpc.secure_channel(address, credentials, options=options)
    else:
        channel = grpc.insecure_channel(address, options=channel_options())
    channel = with_client_id(channel, client_id)
    if traced:
        return tracing.traced_channel(channel, tracer_provider)
    return channel
