"""The consumer's side of the bulk fetch path (proto/seglog/v1/bulk.md): transfer grants from
the gateway, kept per partition until shortly before they expire, and one kept TCP
connection per leader node, read with `recv_into` into a buffer allocated for each chunk, so
the batches reach the fetcher without another copy.

A node that cannot be reached (or closes a connection mid-answer) is left alone for
`UNREACHABLE_S`; its partitions go through the gateway's gRPC Fetch meanwhile.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from opentelemetry import propagate, trace

from ..rpc import bulk_wire
from ..spans import EngineTracer
from ..v1 import bulk_pb2, common_pb2, gateway_pb2_grpc
from .structs import TopicPartition

logger = logging.getLogger(__name__)
tracer = EngineTracer("seglog.client.bulk")

UNREACHABLE_S = 30.0
# A partition the gateway gave no grant for (the bulk path is off, its leader is moving) goes
# through the gRPC path this long before a grant is asked for again.
NO_GRANT_RETRY_S = 10.0
RENEW_BEFORE_MS = 2000  # a grant this close to its expiry is renewed first
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Grant:
    node_id: int
    bulk_address: str
    grant: bytes
    signature: bytes
    expires_at_ms: int
    min_offsets: dict[TopicPartition, int]

    def covers(self, tp: TopicPartition, offset: int, now_ms: int) -> bool:
        minimum = self.min_offsets.get(tp)
        return (
            minimum is not None
            and offset >= minimum
            and now_ms < self.expires_at_ms - RENEW_BEFORE_MS
        )


@dataclass(frozen=True)
class BulkMessage:
    """A chunk as the fetcher reads FetchResponse messages; `records` is a view of the
    buffer the bytes were received into."""

    topic: str
    partition: int
    error: int
    error_message: str
    high_watermark: int
    log_start_offset: int
    records: memoryview | bytes


class BulkFetchError(Exception):
    """The bulk path failed for a node (connection, refusal): use the gRPC path."""


class BulkReader:
    def __init__(
        self,
        stub: gateway_pb2_grpc.GatewayStub,
        timeout_s: float,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.stub = stub
        self.ssl_context = ssl_context
        self.timeout_s = timeout_s
        self._grants: dict[TopicPartition, Grant] = {}
        self._connections: dict[str, socket.socket] = {}
        self._unreachable_until: dict[str, float] = {}
        self._no_grant_until: dict[TopicPartition, float] = {}
        self._spans: dict[int, trace.Span] = {}  # the transfer span of each answer awaited
        self._lock = threading.Lock()

    # -- grants ------------------------------------------------------------------------------

    def route(
        self, wanted: Sequence[tuple[TopicPartition, int]]
    ) -> tuple[dict[str, tuple[Grant, list[tuple[TopicPartition, int]]]], list[TopicPartition]]:
        """(node bulk address -> grant and partitions) for what can go the bulk way, and the
        partitions that must take the gRPC path."""
        now_ms = time.time_ns() // 1_000_000
        now = time.monotonic()
        missing = [
            (tp, o)
            for tp, o in wanted
            if not self._usable(tp, o, now_ms) and self._no_grant_until.get(tp, 0) <= now
        ]
        if missing:
            self._request_grants(missing)
        by_address: dict[str, tuple[Grant, list[tuple[TopicPartition, int]]]] = {}
        fallback = []
        for tp, offset in wanted:
            grant = self._grants.get(tp)
            if (
                grant is None
                or not grant.covers(tp, offset, now_ms)
                or self._unreachable_until.get(grant.bulk_address, 0) > now
            ):
                fallback.append(tp)
                continue
            entry = by_address.setdefault(grant.bulk_address + f"#{id(grant)}", (grant, []))
            entry[1].append((tp, offset))
        return by_address, fallback

    def _usable(self, tp: TopicPartition, offset: int, now_ms: int) -> bool:
        grant = self._grants.get(tp)
        return grant is not None and grant.covers(tp, offset, now_ms)

    def _request_grants(self, missing: list[tuple[TopicPartition, int]]) -> None:
        request = bulk_pb2.FetchGrantsRequest()
        for tp, offset in missing:
            request.partitions.add(topic=tp.topic, partition=tp.partition, fetch_offset=offset)
        retry_at = time.monotonic() + NO_GRANT_RETRY_S
        try:
            response = self.stub.FetchGrants(request, timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the gRPC path still works
            logger.debug("FetchGrants failed: %s", exc)
            for tp, _ in missing:
                self._no_grant_until[tp] = retry_at
            return
        for error in response.errors:
            self._no_grant_until[TopicPartition(error.topic, error.partition)] = retry_at
        for g in response.grants:
            parsed = bulk_pb2.TransferGrant.FromString(g.grant)
            grant = Grant(
                g.node_id,
                g.bulk_address,
                g.grant,
                g.signature,
                g.expires_at_ms,
                {TopicPartition(p.topic, p.partition): p.min_offset for p in parsed.partitions},
            )
            for tp in grant.min_offsets:
                self._grants[tp] = grant

    def forget(self, tp: TopicPartition) -> None:
        """The node answered that it does not lead the partition (any more)."""
        self._grants.pop(tp, None)

    # -- transfers ---------------------------------------------------------------------------

    def fetch(
        self,
        wanted: Sequence[tuple[TopicPartition, int]],
        request_for: Callable[..., common_pb2.FetchRequest],
        on_message: Callable[[BulkMessage], bool],
    ) -> tuple[set[TopicPartition], bool]:
        """One round: every node's request is sent before any answer is read, so the nodes'
        long polls run side by side (they wait only when no partition must also go through
        the gateway). Returns the partitions the gateway must serve, and whether
        `on_message` reported a retriable error or a node failed."""
        by_grant, fallback = self.route(wanted)
        rest = set(fallback)
        sent = []
        for grant, partitions in by_grant.values():
            try:
                request = request_for(partitions, wait=not fallback)
                sent.append((grant, self.send(grant, request), partitions))
            except BulkFetchError:
                rest.update(tp for tp, _ in partitions)
        failed = False
        for grant, sock, partitions in sent:
            try:
                for message in self.receive(grant, sock):
                    if message.error == common_pb2.NOT_LEADER_OR_FOLLOWER:
                        self.forget(TopicPartition(message.topic, message.partition))
                    failed |= on_message(message)
            except BulkFetchError as exc:
                logger.debug("bulk fetch failed, the gateway serves these: %s", exc)
                for tp, _ in partitions:
                    self.forget(tp)
                failed = True
        return rest, failed

    def send(self, grant: Grant, request: common_pb2.FetchRequest) -> socket.socket:
        """Send one fetch to the grant's node; its answer is read with `receive`."""
        sock = self._connection(grant.bulk_address)
        message = bulk_pb2.BulkFetchRequest(
            version=bulk_wire.BULK_VERSION,
            grant=grant.grant,
            signature=grant.signature,
            fetch=request,
        )
        span = tracer.start_span("seglog.bulk.fetch", kind=trace.SpanKind.CLIENT)
        if span.is_recording():
            self._spans[id(sock)] = span
            span.set_attribute("seglog.node_id", grant.node_id)
            span.set_attribute("net.peer.name", grant.bulk_address)
            propagate.inject(message.trace_context, context=trace.set_span_in_context(span))
        try:
            bulk_wire.send_message(sock, message)
        except OSError as exc:
            self._broken(grant.bulk_address, sock, exc)
            raise BulkFetchError(str(exc)) from None
        return sock

    def receive(self, grant: Grant, sock: socket.socket) -> Iterator[BulkMessage]:
        """The answer's chunks, each whole; BulkFetchError (after the chunks already
        yielded) when the connection fails or the node refuses the request."""
        span = self._spans.pop(id(sock), None)
        received = 0
        try:
            while True:
                header = bulk_wire.recv_message(sock, bulk_pb2.BulkFetchChunk)
                if header is None:
                    raise ConnectionError("the node closed the connection mid-answer")
                if header.end:
                    if header.error:
                        raise BulkFetchError(f"refused: {header.error_message}")
                    _end_span(span, received, None)
                    return
                records: memoryview | bytes = b""
                if header.records_length:
                    buffer = bytearray(header.records_length)
                    records = memoryview(buffer)
                    bulk_wire.recv_exactly_into(sock, records)
                    received += header.records_length
                yield BulkMessage(
                    header.topic,
                    header.partition,
                    header.error,
                    header.error_message,
                    header.high_watermark,
                    header.log_start_offset,
                    records,
                )
        except (OSError, ConnectionError, BulkFetchError) as exc:
            _end_span(span, received, exc)
            self._broken(grant.bulk_address, sock, exc)
            if isinstance(exc, BulkFetchError):
                raise
            raise BulkFetchError(str(exc)) from None

    def interrupt(self) -> None:
        """Abandon the answers in flight (a seek or reassignment): their connections close."""
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.interrupt()

    def _connection(self, address: str) -> socket.socket:
        with self._lock:
            sock = self._connections.get(address)
        if sock is not None:
            return sock
        host, port = address.rsplit(":", 1)
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
            if self.ssl_context is not None:
                sock = self.ssl_context.wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            self._unreachable_until[address] = time.monotonic() + UNREACHABLE_S
            raise BulkFetchError(f"cannot reach {address}: {exc}") from None
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._connections[address] = sock
        return sock

    def _broken(self, address: str, sock: socket.socket, exc: BaseException) -> None:
        logger.debug("bulk connection to %s: %s", address, exc)
        with self._lock:
            if self._connections.get(address) is sock:
                del self._connections[address]
        try:
            sock.close()
        except OSError:
            pass


def _end_span(span: trace.Span | None, received: int, error: BaseException | None) -> None:
    """The transfer span (bytes, node; its duration is the transfer's) ends with its answer."""
    if span is None or not span.is_recording():
        return
    span.set_attribute("seglog.bytes", received)
    if error is not None:
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
    span.end()
