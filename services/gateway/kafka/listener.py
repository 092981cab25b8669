"""The Kafka listener of a gateway: accepts client connections and serves each on its own
thread (connection.py), up to `max.connections` at once; past it a new connection is closed
at once rather than queued, so the gateway's threads and memory stay bounded. A connection
idle for `connections.max.idle.ms` is closed.

Security comes from the listener's name, as in Kafka's `listeners`: PLAINTEXT, SSL (TLS with
the gateway's certificate; with the cluster CA and tls_client_auth=required, mutual TLS and
the certificate's principal as on gRPC), SASL_PLAINTEXT and SASL_SSL (PLAIN or OAUTHBEARER
carrying a seglog bearer token, sasl.py).

With `lanes` above 1 the listener binds that many ports, each presented to clients as a
broker of its own (brokers.py), all served alike: any lane answers any request. Metadata
names as each partition's leader the lane of its storage leader, so a client holds one
connection per storage leader, and the one-request-at-a-time rule of a connection no longer
queues one leader's produce behind another's (with one lane, an acks=all request waits for
the slowest of the leaders it spans, and the next waits for it).

`stop` closes the listening sockets and shuts down every open connection, so a request being
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
MAX_KAFKA_LANES = 64


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
        lanes: int = 1,
    ) -> None:
        self.protocol, self.listen = parse_listener(listen)
        self.lanes = lanes
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
        self._servers: list[socket.socket] = []
        self._accepting: list[threading.Thread] = []
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.ports: list[int] = []  # each lane's, once started
        self.accepted_connections = [0] * lanes  # per lane, since start

    @property
    def port(self) -> int:
        return self.ports[0] if self.ports else 0

    @property
    def address(self) -> str:
        return self.lane_addresses[0] if self.ports else _joined(self.listen, 0)

    @property
    def lane_addresses(self) -> list[str]:
        """Each lane's bound address, lane 0 first."""
        return [_joined(self.listen, port) for port in self.ports]

    @property
    def advertised_address(self) -> str:
        """What Metadata names as this gateway's address to clients of this listener."""
        return self._advertised or self.address

    @property
    def advertised_lanes(self) -> list[str]:
        """What Metadata names as each lane's address: the advertised port + i when an
        advertised address is set, else each lane's bound address."""
        if self._advertised is None:
            return self.lane_addresses
        _, port = split_address(self._advertised)
        return [_joined(self._advertised, port + lane) for lane in range(self.lanes)]

    def start(self) -> None:
        host, port = split_address(self.listen)
        if port and port + self.lanes > 65536:
            raise ValueError(f"{self.listen}: {self.lanes} lanes from port {port} pass 65535")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            for lane in range(self.lanes):
                server = socket.create_server(
                    (host, port + lane if port else 0), family=family, backlog=128
                )
                self._servers.append(server)
                self.ports.append(server.getsockname()[1])
        except OSError:
            # A lane's port taken: none of them stays bound, so a retry finds them free.
            for server in self._servers:
                server.close()
            self._servers.clear()
            self.ports.clear()
            raise
        if self.lanes > 1:
            logger.info("gateway's Kafka listener lanes on %s", " ".join(self.lane_addresses))
        for lane, server in enumerate(self._servers):
            accepting = threading.Thread(
                target=self._accept, args=(server, lane), name="kafka-accept", daemon=True
            )
            self._accepting.append(accepting)
            accepting.start()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def _accept(self, server: socket.socket, lane: int) -> None:
        while not self._stopped.is_set():
            try:
                sock, peer = server.accept()
            except OSError:
                if self._stopped.is_set():
                    return
                # Out of file descriptors, most often: retried at a bounded pace, not spun on.
                logger.exception("Kafka listener: accept failed")
                self._stopped.wait(ACCEPT_RETRY_S)
                continue
            self.accepted_connections[lane] += 1
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
        for server in self._servers:
            try:
                server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
            except OSError:
                pass
            server.close()
        for accepting in self._accepting:
            accepting.join(STOP_JOIN_TIMEOUT_S)
        with self._lock:
            connections = dict(self._connections)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in connections.values():
            thread.join(STOP_JOIN_TIMEOUT_S)


def _joined(address: str, port: int) -> str:
    """`address`'s host with `port`, bracketed when IPv6."""
    host, _ = split_address(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
