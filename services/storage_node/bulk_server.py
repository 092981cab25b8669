"""The storage node's bulk listener (proto/seglog/v1/bulk.md): plain TCP beside gRPC, one
thread per connection, serving fetches whose transfer grant verifies, and produce requests
under a produce grant (bulk_produce.py). Segment bytes go to the socket from the `.log` file
by the storage layer (SegmentSlice.write_to -> FileRecords.write_to: `os.sendfile`, Kafka's
transferTo): the node copies nothing in user space, except under TLS, where the bytes must be
encrypted, and for chunks too small to be worth the system calls (bulk_answer.py). Each
connection's requests are read through one buffer (bulk_wire.Receiver).

What is served is what the gRPC Fetch serves a consumer (ReplicaManager.fetch_states /
wait_for_fetch / read_chunks): whole batches as stored, at least one, up to the max bytes,
below the high watermark, at the grant's leader epoch; a follower's fetch-session request is
answered as the gRPC Fetch answers it (ReplicaManager.session_fetch: a header chunk with the
session's id or error, then the partitions with news). A segment removed from the log during
a transfer is still readable: removed segments keep their files open for
`file.delete.delay.ms`, and each transfer sends from a duplicate of the file's descriptor
(FileRecords.write_to), which keeps the file alive until it is done. Anything that fails
mid-answer closes the connection, so the client never takes a partial chunk for data.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import propagate, trace

from seglog.errors import InvalidRequestError, PermissionDeniedError, SeglogError
from seglog.rpc import bulk_wire, check_fetch_request, client_leader_epoch, grants
from seglog.rpc.status import error_code_for
from seglog.security.certs import GATEWAY_IDENTITY, NODE_IDENTITY_PREFIX, node_id_of
from seglog.security.tls import TlsFiles, server_ssl_context
from seglog.spans import EngineTracer
from seglog.v1 import bulk_pb2, common_pb2
from services.memory_pool import RequestMemoryPool

from .acl_narrowings import AclNarrowings
from .bulk_answer import AnswerWriter, send_chunk
from .bulk_produce import BulkProduce
from .fetch_reads import CONSUMER, counted
from .node_metrics import NodeMetrics
from .peer_watch import PeerWatch
from .replica_manager import ReplicaManager

logger = logging.getLogger(__name__)
tracer = EngineTracer("seglog.storage_node.bulk")

DEFAULT_MAX_CONNECTIONS = 256
# A connection proves itself with its first request's grant. Until then it holds a slot and a
# thread for nothing, so it gets this long to send that request whole (TLS handshake
# included), and one peer address may hold only so many such connections at a time: idle
# strangers can neither keep slots nor take them all. Afterwards a connection may idle as long
# as Kafka lets a client connection (connections.max.idle.ms).
DEFAULT_FIRST_REQUEST_TIMEOUT_MS = 10_000
DEFAULT_MAX_UNVERIFIED_PER_PEER = 16
DEFAULT_IDLE_TIMEOUT_MS = 600_000


class BulkServer:
    def __init__(
        self,
        listen: str,
        replicas: ReplicaManager,
        node_id: int,
        secret: bytes,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        first_request_timeout_ms: int = DEFAULT_FIRST_REQUEST_TIMEOUT_MS,
        max_unverified_per_peer: int = DEFAULT_MAX_UNVERIFIED_PER_PEER,
        idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
        tls: TlsFiles | None = None,
        node_identity_prefix: str = NODE_IDENTITY_PREFIX,
        metrics: NodeMetrics | None = None,
        request_memory: RequestMemoryPool | None = None,
        acl_narrowings: AclNarrowings | None = None,
    ) -> None:
        self.metrics = metrics or NodeMetrics(None, replicas)
        self.acl_narrowings = acl_narrowings or AclNarrowings()
        # With TLS the bytes must go through the ssl module, so sendfile's zero copy is lost
        # (no kernel TLS here): the grant still decides what is served.
        self._ssl = None if tls is None else server_ssl_context(tls, "optional")
        self.node_identity_prefix = node_identity_prefix
        host, port = listen.rsplit(":", 1)
        self.replicas = replicas
        self.node_id = node_id
        self.secret = secret
        self.produce = BulkProduce(
            replicas,
            node_id,
            secret,
            self.metrics,
            request_memory or RequestMemoryPool(owner=f"node {node_id}"),
            tls=self._ssl is not None,
            acl_narrowings=self.acl_narrowings,
        )
        self.max_connections = max_connections
        self.first_request_timeout_s = first_request_timeout_ms / 1000
        self.max_unverified_per_peer = max_unverified_per_peer
        self.idle_timeout_s = idle_timeout_ms / 1000
        self._unverified: dict[str, int] = {}  # peer host -> connections yet to verify
        self.refused_connections = 0
        self._socket = socket.create_server((host, int(port)), reuse_port=False)
        self.host = host
        self.port = self._socket.getsockname()[1]
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopping = False
        self._peer_watch = PeerWatch()  # relayed long polls' connections (peer_watch.py)
        self._thread = threading.Thread(target=self._accept_loop, name="bulk-accept", daemon=True)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            _shutdown(conn)
        self._thread.join(timeout=5)
        self._peer_watch.stop()

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                conn, peer = self._socket.accept()
            except OSError:
                return
            host = peer[0]
            with self._lock:
                if self._stopping:
                    # Accepted as `stop` ran: it did not see this connection to shut it down.
                    conn.close()
                    return
                if (
                    len(self._connections) >= self.max_connections
                    or self._unverified.get(host, 0) >= self.max_unverified_per_peer
                ):
                    self.refused_connections += 1
                    conn.close()  # the client falls back to the gRPC path
                    continue
                self._connections.add(conn)
                self._unverified[host] = self._unverified.get(host, 0) + 1
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _receive_timeout(conn, self.first_request_timeout_s)
            threading.Thread(
                target=self._serve, args=(conn, host), name="bulk", daemon=True
            ).start()

    def _verified(self, host: str) -> None:
        with self._lock:
            left = self._unverified.get(host, 0) - 1
            if left > 0:
                self._unverified[host] = left
            else:
                self._unverified.pop(host, None)

    def _serve(self, conn: socket.socket, host: str) -> None:
        unverified = True
        peer_node_id: int | None = None
        peer_name: str | None = None
        try:
            if self._ssl is not None:
                plain = conn
                conn = self._ssl.wrap_socket(conn, server_side=True)
                with self._lock:
                    self._connections.discard(plain)
                    self._connections.add(conn)
                peer_name = _certificate_name(conn)
                peer_node_id = node_id_of(peer_name or "", self.node_identity_prefix)

            def verified() -> None:
                """The connection's first request passed its grant check: it no longer
                counts against its peer's unverified connections (a first request that is
                a long poll would hold that slot for all its wait)."""
                nonlocal unverified
                if unverified:
                    unverified = False
                    self._verified(host)
                    _receive_timeout(conn, self.idle_timeout_s)

            receiver = bulk_wire.Receiver(conn)
            while not self._stopping:
                request = receiver.message(bulk_pb2.BulkFetchRequest)
                if request is None:
                    return
                if request.cancel and not unverified:
                    continue  # the relay gave up a poll answered since (peer_watch.py)
                if request.version == bulk_wire.BULK_PRODUCE_VERSION:
                    if not self.produce.answer(receiver, request, peer_name):
                        return
                elif not self._answer(receiver, request, peer_node_id, peer_name, verified):
                    return
                verified()
        except (OSError, ConnectionError, SeglogError) as exc:
            logger.debug("bulk connection ended: %s", exc)
        except Exception:
            logger.exception("bulk connection failed")
        finally:
            if unverified:
                self._verified(host)
            with self._lock:
                self._connections.discard(conn)
            _shutdown(conn)
            conn.close()

    def _answer(
        self,
        receiver: bulk_wire.Receiver,
        request: bulk_pb2.BulkFetchRequest,
        peer_node_id: int | None,
        peer_name: str | None,
        verified: Callable[[], None],
    ) -> bool:
        """Serve one fetch, `verified` called once its grant checked out; False when it was
        refused (the connection is then closed)."""
        started = time.perf_counter()
        conn = receiver.sock
        try:
            wanted, replica_id, relayed = self._check(request, peer_node_id, peer_name)
        except SeglogError as exc:
            bulk_wire.send_message(
                conn,
                bulk_pb2.BulkFetchChunk(
                    error=error_code_for(exc), error_message=str(exc), end=True
                ),
            )
            return False
        verified()
        fetch = request.fetch
        parent = propagate.extract(request.trace_context) if request.trace_context else None
        span = tracer.start_span("seglog.bulk.serve", kind=trace.SpanKind.SERVER, context=parent)
        if not span.is_recording():
            self._send_answer(receiver, fetch, wanted, replica_id, started, relayed)
            return True
        try:
            # Exceptions are judged below, not by the span: a peer that hung up is no error.
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                sent, answered = self._send_answer(
                    receiver, fetch, wanted, replica_id, started, relayed
                )
        except OSError as exc:  # the fetcher closed its connection: a consumer that left
            span.set_attribute("seglog.peer_closed", True)
            span.end()
            logger.debug("bulk fetch answer cut short: %s", exc)
            raise
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.end()
            raise
        if sent or answered:
            span.set_attribute("seglog.node_id", self.node_id)
            span.set_attribute("seglog.bytes", sent)
            span.end()
        # A long poll that found nothing (a caught-up follower or consumer, every
        # max.wait.ms) leaves its span unended, so it is never exported: idle polls would
        # otherwise be most of a quiet cluster's traces.
        return True

    def _send_answer(
        self,
        receiver: bulk_wire.Receiver,
        fetch: common_pb2.FetchRequest,
        wanted: list[tuple[str, int, int, int, int, int]],
        replica_id: int,
        started: float,
        relayed: bool,
    ) -> tuple[int, bool]:
        """Wait for and send one answer: the record bytes sent, and whether any partition
        was answered an error or a diverging epoch."""
        max_bytes = fetch.max_bytes or (1 << 31) - 1
        answer = AnswerWriter(receiver.sock)
        if fetch.HasField("session_id"):
            found = self.replicas.session_fetch(
                fetch, client_leader_epoch, lambda: not self._stopping
            )
            answer.message(
                bulk_pb2.BulkFetchChunk(session_id=found.session_id, session_error=found.error)
            )
            chunks = found.answered(self.replicas.read_chunks(list(found.states), max_bytes))
        else:
            states = self.replicas.fetch_states(wanted, replica_id)
            for state in states:
                state.isolation_level = fetch.isolation_level
            # Bytes already after a relayed poll's request can only be the gateway's cancel:
            # it gave the poll up, which is answered at once with what there is.
            if fetch.max_wait_ms > 0 and not (relayed and receiver.buffered()):
                self._peer_watch.wait_for_fetch(
                    self.replicas,
                    receiver.sock if relayed else None,
                    states,
                    max(fetch.min_bytes, 0),
                    fetch.max_wait_ms,
                    lambda: not self._stopping,
                )
            chunks = self.replicas.read_chunks(states, max_bytes)
        sent = 0
        problem = False
        for chunk in counted(chunks, self.metrics, "BulkFetch", started, replica_id >= 0):
            sent += send_chunk(answer, chunk)
            problem = problem or chunk.error is not None or chunk.diverging is not None
        answer.message(bulk_pb2.BulkFetchChunk(end=True))
        answer.flush()
        return sent, problem

    def _check(
        self,
        request: bulk_pb2.BulkFetchRequest,
        peer_node_id: int | None = None,
        peer_name: str | None = None,
    ) -> tuple[list[tuple[str, int, int, int, int, int]], int, bool]:
        """The whole request against its grant, before anything is read: the partitions as
        fetch_states takes them, the replica id (-1: a consumer), and whether it is the
        gateway's relay.

        The gateway's fetch relay grant names no partition: the gateway checked the caller's
        Read before relaying, as it does before its gRPC Fetch, and routed each partition by
        the leader epoch the request names, which the node then holds it to (a node that no
        longer leads that epoch answers NOT_LEADER or FENCED_LEADER_EPOCH, never another
        leader's log). It is the gateway's alone, and on a TLS cluster taken only over the
        gateway's certificate.

        Every node holds the cluster secret, so a grant's signature alone cannot tell which
        node made it: node 2 could sign a replica grant naming replica 3 and count as node
        3's progress toward the high watermark. On a TLS cluster a replica grant is
        therefore taken only over a connection whose certificate names that very replica
        (Kafka's rule: no broker acts as another), as the node's gRPC Fetch checks. A
        plaintext cluster has no identities to bind to (its gRPC API is as open)."""
        if request.version != bulk_wire.BULK_VERSION:
            raise InvalidRequestError(
                f"bulk protocol version {request.version}: this node speaks "
                f"{bulk_wire.BULK_VERSION} (fetch) and {bulk_wire.BULK_PRODUCE_VERSION} (produce)"
            )
        grant = grants.verify(self.secret, request.grant, request.signature, self.node_id)
        self.acl_narrowings.check(grant)
        fetch = request.fetch
        check_fetch_request(fetch)
        replica_id = fetch.replica_id if fetch.HasField("replica_id") else CONSUMER
        if replica_id != (CONSUMER if grant.replica_id is None else grant.replica_id):
            raise InvalidRequestError(
                f"transfer grant: replica id {replica_id} is not the granted one"
            )
        if self._ssl is not None and replica_id != CONSUMER and peer_node_id != replica_id:
            raise PermissionDeniedError(
                f"a replica fetch as node {replica_id} needs that node's certificate; this "
                f"connection's names "
                f"{'no node' if peer_node_id is None else f'node {peer_node_id}'}"
            )
        if grant.fetch_relay and self._ssl is not None and peer_name != GATEWAY_IDENTITY:
            raise PermissionDeniedError(
                f"a relayed fetch needs the gateway's certificate; this connection's names "
                f"{peer_name or 'nothing'}"
            )
        wanted = []
        for p in fetch.partitions:
            if grant.fetch_relay:
                leader_epoch = client_leader_epoch(p)
                if leader_epoch < 0:
                    raise InvalidRequestError(
                        f"a relayed fetch of {p.topic}-{p.partition} names no leader epoch"
                    )
            else:
                granted = grant.partitions.get((p.topic, p.partition))
                if granted is None:
                    raise InvalidRequestError(
                        f"transfer grant: {p.topic}-{p.partition} is not granted on this node"
                    )
                min_offset, leader_epoch = granted
                if p.fetch_offset < min_offset:
                    raise InvalidRequestError(
                        f"transfer grant: {p.topic}-{p.partition} from offset "
                        f"{p.fetch_offset} is below the granted {min_offset}"
                    )
                if grant.replica_id is not None:  # Kafka's replica fetch: the request's epochs
                    leader_epoch = client_leader_epoch(p)
            last_fetched = p.last_fetched_epoch if p.HasField("last_fetched_epoch") else -1
            wanted.append(
                (
                    p.topic,
                    p.partition,
                    p.fetch_offset,
                    p.partition_max_bytes,
                    leader_epoch,
                    last_fetched,
                )
            )
        return wanted, replica_id, grant.fetch_relay


def _certificate_name(conn: socket.socket) -> str | None:
    """The common name of the peer's certificate (verified against the cluster CA during the
    handshake), or None when it sent none."""
    assert isinstance(conn, ssl.SSLSocket)
    certificate: dict[str, Any] = dict(conn.getpeercert() or {})
    subject: tuple[tuple[tuple[str, str], ...], ...] = certificate.get("subject", ())
    names = [value for rdn in subject for key, value in rdn if key == "commonName"]
    return names[-1] if names else None


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _receive_timeout(conn: socket.socket, seconds: float) -> None:
    """Bound each receive, not sends: a Python socket timeout would make the descriptor
    non-blocking, and os.sendfile on it would fail whenever the send buffer is full. A
    receive that times out raises BlockingIOError, which ends the connection."""
    whole = int(seconds)
    conn.setsockopt(
        socket.SOL_SOCKET,
        socket.SO_RCVTIMEO,
        struct.pack("ll", whole, int((seconds - whole) * 1_000_000)),
    )
