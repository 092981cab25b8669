"""The Kafka listener of a gateway, built as Kafka's broker builds its SocketServer: an
acceptor thread per port takes connections and deals them out to `num.network.threads`
network threads (processor.py), each serving its connections on non-blocking sockets through
a selector; complete requests go through a bounded queue (`queued.max.requests`) to
`num.io.threads` request handlers (handler_pool.py; produce and fetches to a pool of their
own, request_dispatch.py says why), whose answers go back to the network thread. So an idle
connection costs a socket, a selector entry and a few small objects (measured: a few KiB),
never a thread, and 10,000 of them cost megabytes. Nor does a request whose answer waits on
others (a JoinGroup on its group, a follower's SyncGroup on its leader's, a Metadata on the
nodes of a topic it auto-creates): its handler returns at once and the answer is sent when
the core completes it (later.py), as Kafka's purgatory answers without a thread.

What a connection may hold before it authenticates, and how the request pool is shared:
channel.py. How many connections are kept (`max.connections`, `max.connections.per.ip`,
`max.connections.per.ip.overrides`): connection_quotas.py; past a bound a new connection is
closed at once. A connection that has not authenticated (SASL) or sent a complete request
(other listeners) within `connections.first.request.timeout.ms` is closed, and one idle for
`connections.max.idle.ms`.

Security comes from the listener's name, as in Kafka's `listeners`: PLAINTEXT, SSL (TLS with
the gateway's certificate; with the cluster CA and tls_client_auth=required, mutual TLS and
the certificate's principal as on gRPC), SASL_PLAINTEXT and SASL_SSL (PLAIN or OAUTHBEARER
carrying a seglog bearer token, sasl.py).

Beside its own port the listener serves a lane per registered storage node (node_lanes.py):
each node is a broker of its own at the listener's port + its node id (brokers.py), all lanes
served alike: any lane answers any request, but a produce for a partition its node does not
lead, answered NOT_LEADER_OR_FOLLOWER as that broker would (lane_leaders.py). Metadata
names as each partition's leader its storage leader, so a client holds one connection per
storage leader, and the one-request-at-a-time rule of a connection no longer queues one
leader's produce behind another's (with a single port, an acks=all request waits for the
slowest of the leaders it spans, and the next waits for it).

`stop` closes the listening sockets and every open connection, so a request being read ends
and no new one starts; a request already being handled finishes first on its handler thread
(its answer is then dropped).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import resource
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import trace

from seglog.security.tls import server_ssl_context
from services.wait_slots import DEFAULT_MAX_WAITING_CALLS, SERVER_MAX_WORKERS

from .api_table import ApiTable
from .brokers import split_address
from .connection_quotas import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_IP,
    ConnectionQuotas,
)
from .fetch_sessions import FetchSessionCache, FetchSessionSettings
from .handler_pool import DEFAULT_NUM_IO_THREADS, DEFAULT_QUEUED_MAX_REQUESTS, RequestHandlerPool
from .listener_context import ListenerContext
from .node_lanes import NO_NODE, LaneKeeper, NodeLanes
from .processor import Processor

if TYPE_CHECKING:
    from .core import KafkaCore

logger = logging.getLogger(__name__)

DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms
DEFAULT_NUM_NETWORK_THREADS = 3  # Kafka's num.network.threads
# Not a Kafka setting (its broker has only the idle timeout, 10 minutes, for a connection
# that never speaks). A Kafka client sends ApiVersions as soon as it is connected and, on a
# SASL listener, authenticates within its own timeouts (librdkafka's
# api.version.request.timeout.ms is 10 s; the Java client's request.timeout.ms 30 s spans
# the whole exchange), so a connection with nothing complete after 10 s is not a client
# being slow but a slot held: 10 s leaves room for a TLS handshake over a bad network (the
# handshake alone has 10 s too) and frees a flood's slots 60 times sooner than the idle
# timeout.
DEFAULT_CONNECTIONS_FIRST_REQUEST_TIMEOUT_MS = 10_000
# The waiting requests' own pool (request_dispatch.py's WAITING_APIS): as many threads as the
# gateway lets long polls wait at once (16), plus 8 for acks=all produce and num.io.threads'
# worth (8) for the polls past that bound, which are answered at once: 32 threads, started
# as work comes.
WAITING_REQUEST_THREADS = DEFAULT_MAX_WAITING_CALLS + SERVER_MAX_WORKERS // 4
STOP_JOIN_TIMEOUT_S = 5.0
# File descriptors kept beside the Kafka connections (node connections, gRPC, files).
SPARE_FILE_DESCRIPTORS = 1024
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


def _ssl_context(protocol: str, core: KafkaCore) -> ssl.SSLContext | None:
    """TLS for SSL and SASL_SSL listeners: the gateway's certificate; client certificates
    from the cluster CA required as on the gRPC listener (`tls_client_auth`)."""
    if not protocol.endswith("SSL"):
        return None
    tls = core.tls
    if tls is None:
        raise ValueError(f"a {protocol} Kafka listener needs --tls-cert and --tls-key")
    required = tls.ca is not None and core.tls_client_auth == "required"
    return server_ssl_context(tls, "required" if required else "none")


@dataclass(frozen=True)
class ListenerLimits:
    """The listener's threads and bounds, under Kafka's names."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    # (host, count) pairs: Kafka's max.connections.per.ip.overrides, parsed.
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    connections_first_request_timeout_ms: int = DEFAULT_CONNECTIONS_FIRST_REQUEST_TIMEOUT_MS
    num_network_threads: int = DEFAULT_NUM_NETWORK_THREADS
    num_io_threads: int = DEFAULT_NUM_IO_THREADS
    queued_max_requests: int = DEFAULT_QUEUED_MAX_REQUESTS
    # Clients' fetch sessions (KIP-227), kept per listener: fetch_sessions.py.
    fetch_sessions: FetchSessionSettings = FetchSessionSettings()

    def __post_init__(self) -> None:
        for name in (
            "max_connections",
            "max_connections_per_ip",
            "num_network_threads",
            "num_io_threads",
            "queued_max_requests",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '.')} must be at least 1")


class KafkaListener:
    def __init__(
        self,
        listen: str,
        table: ApiTable,
        core: KafkaCore,
        *,
        max_request_bytes: int,
        max_connections: int | None = None,
        connections_max_idle_ms: int | None = None,
        limits: ListenerLimits | None = None,
        advertised_listener: str | None = None,
    ) -> None:
        """`limits` (defaults: Kafka's); `max_connections` and `connections_max_idle_ms`,
        when given, replace those of `limits`."""
        limits = limits or ListenerLimits()
        if max_connections is not None:
            limits = dataclasses.replace(limits, max_connections=max_connections)
        if connections_max_idle_ms is not None:
            limits = dataclasses.replace(limits, connections_max_idle_ms=connections_max_idle_ms)
        self.limits = limits
        self.protocol, self.listen = parse_listener(listen)
        self._advertised = (
            None if advertised_listener is None else (parse_listener(advertised_listener)[1])
        )
        self.ssl_context = _ssl_context(self.protocol, core)
        self.sasl_required = self.protocol.startswith("SASL_")
        if self.sasl_required and core.authorization.tokens is None:
            raise ValueError(
                f"{listen!r}: SASL needs bearer tokens to verify (--token-file or "
                f"--oauth-jwks-file)"
            )
        self.table = table
        self.core = core
        self.max_request_bytes = max_request_bytes
        self.max_connections = limits.max_connections
        self.idle_timeout_s = limits.connections_max_idle_ms / 1000
        self.tracer = trace.get_tracer(__name__, tracer_provider=core.tracer_provider)
        self.quotas = ConnectionQuotas(
            limits.max_connections,
            limits.max_connections_per_ip,
            dict(limits.max_connections_per_ip_overrides),
        )
        self.handlers = RequestHandlerPool(
            "kafka-request-handler", limits.num_io_threads, limits.queued_max_requests
        )
        self.waiting_handlers = RequestHandlerPool(
            "kafka-waiting-request-handler",
            WAITING_REQUEST_THREADS + limits.num_io_threads,
            limits.queued_max_requests,
        )
        # A client's fetch session is with the broker it fetches from: this listener's lanes
        # share one cache; another gateway's listener keeps its own (fetch_sessions.py).
        self.fetch_sessions = FetchSessionCache(limits.fetch_sessions)
        self.processors: list[Processor] = []
        self._next_processor = itertools.cycle(range(limits.num_network_threads))
        self._servers: list[socket.socket] = []
        self._accepting: list[threading.Thread] = []
        self._stopped = threading.Event()
        self.refused_connections = 0
        self.ports: list[int] = []  # the listener's own, once started
        # Per lane since start: node id (NO_NODE: the listener's port when no node's).
        self.accepted_connections: dict[int, int] = {}
        self.node_lanes: NodeLanes | None = None
        self._lane_keeper: LaneKeeper | None = None

    @property
    def port(self) -> int:
        return self.ports[0] if self.ports else 0

    @property
    def address(self) -> str:
        return _joined(self.listen, self.ports[0] if self.ports else 0)

    @property
    def lane_addresses(self) -> dict[int, str]:
        """Each node's lane's bound address, by node id."""
        lanes = self.node_lanes.lanes if self.node_lanes is not None else {}
        return {node: _joined(self.listen, lane.port) for node, lane in lanes.items()}

    @property
    def advertised_address(self) -> str:
        """What Metadata names as this gateway's address to clients of this listener."""
        return self._advertised or self.address

    def node_address(self, node: int, *, bound: bool = True) -> tuple[str, int] | None:
        """What Metadata names as `node`'s broker address: its lane's advertised address; the
        listener's own when its lane cannot be bound; None when it has none (not registered,
        or gone; with `bound` False, where the rule puts it all the same). A node registered
        since the keeper last looked gets its lane now: a bind, once in the node's life, never
        a call to anyone."""
        lanes, keeper = self.node_lanes, self._lane_keeper
        if lanes is None:
            return None
        if not bound:
            return lanes.ruled_address(node)
        address = lanes.address(node)
        if address is None and keeper is not None and keeper.refresh_if_behind():
            address = lanes.address(node)  # registered since the keeper last looked
        if address is None and node in lanes.unplaced:
            address = split_address(self.advertised_address)
        return address

    def start(self) -> None:
        host, port = split_address(self.listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server = socket.create_server((host, port), family=family, backlog=1024)
        self._servers.append(server)
        self.ports.append(server.getsockname()[1])
        _raise_open_files_limit(self.max_connections + SPARE_FILE_DESCRIPTORS)
        advertised = None if self._advertised is None else split_address(self._advertised)
        # Lanes at the port as configured (0: each kernel-picked), advertised at the
        # advertised port + id when one is set.
        self.node_lanes = NodeLanes(host, port, advertised, self._accept)
        context = ListenerContext(
            table=self.table,
            core=self.core,
            tracer=self.tracer,
            pool=self.core.request_memory,
            handlers=self.handlers,
            waiting_handlers=self.waiting_handlers,
            ssl_context=self.ssl_context,
            sasl_required=self.sasl_required,
            advertised_address=self.advertised_address,
            node_address=self.node_address,
            max_request_bytes=self.max_request_bytes,
            idle_timeout_s=self.idle_timeout_s,
            first_request_timeout_s=self.limits.connections_first_request_timeout_ms / 1000,
            closed=self.quotas.closed,
            fetch_sessions=self.fetch_sessions,
        )
        self.processors = [Processor(i, context) for i in range(self.limits.num_network_threads)]
        for processor in self.processors:
            processor.start()
        accepting = threading.Thread(
            target=self._accept, args=(server, None), name="kafka-acceptor", daemon=True
        )
        self._accepting.append(accepting)
        accepting.start()
        self._lane_keeper = LaneKeeper(self.node_lanes, self.core.registry)
        self.core.registry.listeners.append(self._lane_keeper.changed)
        self._lane_keeper.start()

    @property
    def open_connections(self) -> int:
        return self.quotas.total

    @property
    def waiting_for_memory(self) -> int:
        return sum(processor.waiting_for_memory for processor in self.processors)

    def _accept(self, server: socket.socket, node: int | None) -> None:
        """Accepts on `server` until it is closed: a node's lane (`node`), or the listener's
        own port (None: node 0's lane when the listener's port is node 0's, else no node's)."""
        while not self._stopped.is_set():
            try:
                sock, peer = server.accept()
            except OSError:
                if self._stopped.is_set() or server.fileno() == -1 or self._released(node):
                    return  # stopping, or the lane closed (its node gone)
                # Out of file descriptors, most often: retried at a bounded pace, not spun on.
                logger.exception("Kafka listener: accept failed")
                self._stopped.wait(ACCEPT_RETRY_S)
                continue
            lane = node
            if lane is None:
                lane = NO_NODE if self.node_lanes is None else self.node_lanes.listener_node()
            self.accepted_connections[lane] = self.accepted_connections.get(lane, 0) + 1
            try:
                self._open(sock, peer, lane)
            except Exception:
                logger.exception("Kafka listener: opening a connection from %s failed", peer)
                sock.close()

    def _released(self, node: int | None) -> bool:
        lanes = self.node_lanes
        return node is not None and lanes is not None and node not in lanes.lanes

    def _open(self, sock: socket.socket, peer: tuple[str, int], lane: int) -> None:
        refusal = "the listener is stopping" if self._stopped.is_set() else None
        refusal = refusal or self.quotas.try_open(peer[0])
        if refusal is not None:
            self.refused_connections += 1
            logger.warning("Kafka listener: refusing a connection from %s: %s", peer[0], refusal)
            sock.close()
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            sock.close()
            self.quotas.closed(peer[0])
            return
        self.processors[next(self._next_processor)].accept(sock, peer, lane)

    def stop(self) -> None:
        self._stopped.set()
        if self._lane_keeper is not None:
            self._lane_keeper.stop()
        for server in self._servers:
            try:
                server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
            except OSError:
                pass
            server.close()
        for accepting in self._accepting:
            accepting.join(STOP_JOIN_TIMEOUT_S)
        for processor in self.processors:
            processor.stop()
        self.handlers.stop()
        self.waiting_handlers.stop()


def _raise_open_files_limit(wanted: int) -> None:
    """Every connection is a file descriptor: the soft limit raised toward `wanted` (as far
    as the hard limit lets), with a warning when max.connections cannot all be open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        logger.warning(
            "open files limit %d is below max.connections + %d: connections past it fail "
            "to be accepted (raise ulimit -n)",
            soft,
            SPARE_FILE_DESCRIPTORS,
        )


def _joined(address: str, port: int) -> str:
    """`address`'s host with `port`, bracketed when IPv6."""
    host, _ = split_address(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
