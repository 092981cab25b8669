"""The Kafka listener of a gateway: accepts client connections and serves each on its own
thread (connection.py), up to `max.connections` at once; past it a new connection is closed
at once rather than queued, so the gateway's threads and memory stay bounded. A connection
idle for `connections.max.idle.ms` is closed.

Security comes from the listener's name, as in Kafka's `listeners`: PLAINTEXT, SSL (TLS with
the gateway's certificate; with the cluster CA and tls_client_auth=required, mutual TLS and
the certificate's principal as on gRPC), SASL_PLAINTEXT and SASL_SSL (PLAIN or OAUTHBEARER
carrying a seglog bearer token, sasl.py).

`stop` closes the listening socket and shuts down every open connection, so a request being
read ends and no new one starts; a request already being handled finishes first (its answer
write then fails on the closed socket).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import socket
import ssl
import threading
from typing import TYPE_CHECKING

from opentelemetry import trace

from seglog.security.tls import server_ssl_context

from .api_table import ApiTable
from .brokers import split_address
from .connection import KafkaConnection
from .kafka_call import ConnectionIdentity

if TYPE_CHECKING:
    from ..server import Gateway

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms
STOP_JOIN_TIMEOUT_S = 5.0
ACCEPT_RETRY_S = 0.1
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_listener(text: str) -> tuple[str, str]:
    """`PLAINTEXT://host:port` (Kafka's listeners syntax) or `host:port` (PLAINTEXT) into
    (security protocol, host:port); ValueError for anything else."""
    protocol, sep, address = text.partition("://")
    if not sep:
        protocol, address = "PLAINTEXT", text
    protocol = protocol.upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"{text!r}: security protocol {protocol!r} is not one of "
            f"{', '.join(SECURITY_PROTOCOLS)}"
        )
    if "," in address:
        raise ValueError(f"{text!r}: one Kafka listener per gateway")
    host, port = split_address(address)
    if not 0 <= port < 65536:
        raise ValueError(f"{text!r}: port {port} is out of range")
    return protocol, address


def api_table_for(gateway: Gateway) -> ApiTable:
    """Every `*_apis` module of this package registers its APIs (in name order): an area
    adds a module, not a line here."""
    table = ApiTable()
    package = importlib.import_module(__name__.rsplit(".", 1)[0])
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
    for name in names:
        if name.endswith("_apis"):
            importlib.import_module(f"{package.__name__}.{name}").register(table, gateway)
    return table


def _ssl_context(protocol: str, gateway: Gateway) -> ssl.SSLContext | None:
    """TLS for SSL and SASL_SSL listeners: the gateway's certificate; client certificates
    from the cluster CA required as on the gRPC listener (`tls_client_auth`)."""
    if not protocol.endswith("SSL"):
        return None
    tls = gateway.config.tls
    if tls is None:
        raise ValueError(f"a {protocol} Kafka listener needs --tls-cert and --tls-key")
    required = tls.ca is not None and gateway.config.tls_client_auth == "required"
    return server_ssl_context(tls, "required" if required else "none")


class KafkaListener:
    def __init__(
        self,
        listen: str,
        table: ApiTable,
        gateway: Gateway,
        *,
        max_request_bytes: int,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS,
        advertised_listener: str | None = None,
    ) -> None:
        self.protocol, self.listen = parse_listener(listen)
        self._advertised = (
            None if advertised_listener is None else (parse_listener(advertised_listener)[1])
        )
        self.ssl_context = _ssl_context(self.protocol, gateway)
        self.sasl_required = self.protocol.startswith("SASL_")
        if self.sasl_required and gateway.authorization.tokens is None:
            raise ValueError(
                f"{listen!r}: SASL needs bearer tokens to verify (--token-file or "
                f"--oauth-jwks-file)"
            )
        self.table = table
        self.gateway = gateway
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.idle_timeout_s = connections_max_idle_ms / 1000
        self.tracer = trace.get_tracer(__name__, tracer_provider=gateway.tracer_provider)
        self._server: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.port = 0

    @property
    def address(self) -> str:
        host, _ = split_address(self.listen)
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def advertised_address(self) -> str:
        """What Metadata names as this gateway's address to clients of this listener."""
        return self._advertised or self.address

    def start(self) -> None:
        host, port = split_address(self.listen)
        self._server = socket.create_server(
            (host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET, backlog=128
        )
        self.port = self._server.getsockname()[1]
        self._accepting = threading.Thread(target=self._accept, name="kafka-accept", daemon=True)
        self._accepting.start()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def _accept(self) -> None:
        assert self._server is not None
        while not self._stopped.is_set():
            try:
                sock, peer = self._server.accept()
            except OSError:
                if self._stopped.is_set():
                    return
                # Out of file descriptors, most often: retried at a bounded pace, not spun on.
                logger.exception("Kafka listener: accept failed")
                self._stopped.wait(ACCEPT_RETRY_S)
                continue
            try:
                self._open(sock, peer)
            except Exception:
                logger.exception("Kafka listener: opening a connection from %s failed", peer)
                sock.close()

    def _open(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        with self._lock:
            if len(self._connections) >= self.max_connections or self._stopped.is_set():
                logger.warning(
                    "Kafka listener: refusing a connection from %s: %d open (max.connections)",
                    peer[0],
                    len(self._connections),
                )
                sock.close()
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self.idle_timeout_s)
            if self.ssl_context is not None:
                # The handshake runs on the connection's thread, not the accepting one.
                sock = self.ssl_context.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                )
            connection = KafkaConnection(
                sock,
                ConnectionIdentity(peer[0], peer[1]),
                self.table,
                self.gateway,
                max_request_bytes=self.max_request_bytes,
                tracer=self.tracer,
                sasl_required=self.sasl_required,
                advertised_address=self.advertised_address,
            )
            thread = threading.Thread(
                target=self._serve, args=(sock, connection), name="kafka-connection", daemon=True
            )
            self._connections[sock] = thread
        thread.start()

    def _serve(self, sock: socket.socket, connection: KafkaConnection) -> None:
        try:
            connection.serve()
        finally:
            with self._lock:
                self._connections.pop(sock, None)

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            try:
                self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
            except OSError:
                pass
            self._server.close()
        if self._accepting is not None:
            self._accepting.join(STOP_JOIN_TIMEOUT_S)
        with self._lock:
            connections = dict(self._connections)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in connections.values():
            thread.join(STOP_JOIN_TIMEOUT_S)
