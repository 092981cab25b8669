"""The client side of the bulk path (proto/seglog/v1/bulk.md), one for every user of it: the
consumer and the Spark reader (through client/bulk.py, which adds the gateway's grants), a
follower's replica fetcher (which signs its own), and the gateway's produce and fetch relays
(services/gateway/routing/produce_relay.py and fetch_relay.py, their own grants). A
`BulkConnection` is one kept TCP connection (TLS when given a context) to one storage node's
bulk listener; a fetch is sent with its signed transfer grant, and the answer's chunks are
read with `recv_into` into a buffer allocated for each chunk, so the batches reach the
caller without another copy.

One error handling for all: anything that goes wrong — the node unreachable, the connection
lost or closed mid-answer, a frame that does not parse, the node refusing the request —
raises BulkFetchError and closes the connection, and so does an answer abandoned before its
end. A connection is therefore never reused with part of an old answer unread, and a caller
never takes a partial chunk for data; what to do next (the gRPC path, for how long) is the
caller's policy.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from opentelemetry import propagate, trace

from ..spans import EngineTracer
from ..v1 import bulk_pb2, common_pb2
from . import bulk_wire

logger = logging.getLogger(__name__)
tracer = EngineTracer("seglog.client.bulk")


class BulkFetchError(Exception):
    """The bulk path failed for a node (connection, refusal): use the gRPC path."""


class BulkRefused(BulkFetchError):
    """The node refused the request as a whole (its grant, its version) before answering
    anything."""


class BulkRelayTimeout(BulkFetchError):
    """A relayed produce had no answer in its time (the connection is closed)."""


@dataclass(frozen=True)
class BulkMessage:
    """One chunk of an answer: its header as the node sent it (watermarks, error, diverging
    epoch, segment base offset) and `records`, a view of the buffer the bytes were received
    into. It reads as the gRPC path's FetchResponse does, so callers handle both alike."""

    header: bulk_pb2.BulkFetchChunk
    records: memoryview | bytes

    @property
    def topic(self) -> str:
        return self.header.topic

    @property
    def partition(self) -> int:
        return self.header.partition

    @property
    def error(self) -> int:
        return self.header.error

    @property
    def error_message(self) -> str:
        return self.header.error_message

    @property
    def aborted_transactions(self) -> Sequence[common_pb2.AbortedTransaction]:
        aborted: Sequence[common_pb2.AbortedTransaction] = self.header.aborted_transactions
        return aborted

    @property
    def high_watermark(self) -> int:
        return self.header.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.header.log_start_offset


class BulkConnection:
    """One connection to a node's bulk listener. Answers come in the order the fetches were
    sent (`send` several, then `receive` each to its end, in order); `shutdown` may be
    called from any thread to abandon the answers awaited."""

    def __init__(self, address: str, sock: socket.socket, *, traced: bool) -> None:
        self.address = address
        self._sock = sock
        self._receiver = bulk_wire.Receiver(sock)  # every read of the answers goes through it
        self._traced = traced
        self._spans: deque[trace.Span] = deque()  # the transfer span of each answer awaited
        self._closed = threading.Event()
        # Set when this side gives the answer up (close, shutdown, an abandoned answer): the
        # transfer then ends cancelled, which is no error of the node's or the network's.
        self._abandoned = False

    @classmethod
    def open(
        cls,
        address: str,
        *,
        connect_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        traced: bool = False,
    ) -> BulkConnection:
        """Connect to `address` (host:port); BulkFetchError when it cannot be reached.
        `traced`: each transfer is a client span carrying its trace context to the node."""
        host, port = address.rsplit(":", 1)
        try:
            sock = socket.create_connection((host, int(port)), timeout=connect_timeout_s)
        except OSError as exc:
            raise BulkFetchError(f"cannot reach {address}: {exc}") from None
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=host)
            except OSError as exc:  # the handshake failed (ssl.SSLError is an OSError)
                sock.close()
                raise BulkFetchError(f"cannot reach {address}: {exc}") from None
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(address, sock, traced=traced)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def fileno(self) -> int:
        """For a selector waiting on the answers of several connections."""
        return self._sock.fileno()

    def has_buffered_bytes(self) -> bool:
        """Bytes already read off the socket but not yet taken (the receiver's buffer, or
        decrypted by TLS): a selector does not see them, so an answer may be ready without
        the socket being readable."""
        if self._receiver.buffered():
            return True
        return isinstance(self._sock, ssl.SSLSocket) and self._sock.pending() > 0

    def send(
        self, grant: bytes, signature: bytes, fetch: common_pb2.FetchRequest, *, node_id: int
    ) -> None:
        """Send one fetch under its grant to the node `node_id`; its answer is read with
        `receive`."""
        message = bulk_pb2.BulkFetchRequest(
            version=bulk_wire.BULK_VERSION, grant=grant, signature=signature, fetch=fetch
        )
        self._start_span("seglog.bulk.fetch", message, node_id)
        try:
            bulk_wire.send_message(self._sock, message)
        except OSError as exc:
            self._fail(exc, 0)
            raise BulkFetchError(f"sending to {self.address}: {exc}") from None

    def produce(
        self,
        grant: bytes,
        signature: bytes,
        request: bytes,
        *,
        node_id: int,
        timeout_s: float,
    ) -> bulk_pb2.BulkProduceAnswer:
        """Relay a ProduceRequest's wire bytes under the gateway's produce-relay grant
        (bulk.md, version 3) and wait for the node's answer. An answer with `end` set is the
        node's refusal of the relay itself (nothing written; the connection is then closed).
        BulkFetchError (BulkRelayTimeout past `timeout_s`) when the connection fails once
        sending began: whether the node wrote the request is then unknown."""
        frame = self.produce_frame(grant, signature, request, node_id=node_id)
        try:
            self._sock.settimeout(timeout_s)
            for part in frame:
                self._sock.sendall(part)
            answer = self._receiver.message(bulk_pb2.BulkProduceAnswer)
            if answer is None:
                raise ConnectionError("the node closed the connection before answering")
            self._sock.settimeout(None)
        except TimeoutError as exc:
            self._fail(exc, 0)
            raise BulkRelayTimeout(
                f"{self.address}: no answer to a relayed produce in {timeout_s:.1f} s"
            ) from None
        except (OSError, ConnectionError, DecodeError) as exc:
            self._fail(exc, 0)
            raise BulkFetchError(f"{self.address}: {exc}") from None
        self._end_span(len(request), None)
        if answer.end:
            self.close()
        return answer

    def produce_frame(
        self, grant: bytes, signature: bytes, request: bytes, *, node_id: int
    ) -> list[bytes]:
        """The bytes of `produce`'s exchange, for a caller that writes them and reads the
        answer itself without blocking (produce_selector.py: `send_nowait`, `recv_nowait`,
        then `produce_answered`); the transfer's span starts now."""
        message = bulk_pb2.BulkFetchRequest(
            version=bulk_wire.BULK_PRODUCE_VERSION,
            grant=grant,
            signature=signature,
            produce_length=len(request),
        )
        self._start_span("seglog.bulk.produce", message, node_id)
        return bulk_wire.frame_message(message, request)

    def send_nowait(self, buffers: list[memoryview]) -> int:
        """How many bytes of `buffers` the socket took without waiting (0: it is full).
        OSError when the connection failed."""
        if self._sock.gettimeout() != 0.0:
            self._sock.settimeout(0.0)  # `produce` sets its own timeout again
        try:
            return self._sock.sendmsg(buffers)
        except BlockingIOError:
            return 0

    def recv_nowait(self, max_bytes: int) -> bytes | None:
        """What the socket holds, up to `max_bytes`, without waiting: None when nothing yet,
        b"" when the node closed the connection. OSError when it failed."""
        if self._sock.gettimeout() != 0.0:
            self._sock.settimeout(0.0)
        try:
            return self._sock.recv(max_bytes)
        except BlockingIOError:
            return None

    def produce_answered(self, request_bytes: int, error: BaseException | None) -> None:
        """A `produce_frame` exchange ended: with its answer (`error` None), or failed (the
        connection is closed: it may hold part of an answer)."""
        if error is not None:
            self._fail(error, 0)
            return
        self._end_span(request_bytes, None)

    def cancel(self) -> None:
        """Ask the node to end the long poll in flight now (the gateway's relay, bulk.md):
        its answer, with what it has, still comes and is read as any answer. Any thread; on a
        TLS connection, where two threads may not use the socket at once, and on a connection
        that failed, the answer is abandoned instead (`shutdown`)."""
        if isinstance(self._sock, ssl.SSLSocket):
            self.shutdown()
            return
        try:
            bulk_wire.send_message(self._sock, bulk_pb2.BulkFetchRequest(cancel=True))
        except OSError:
            self.shutdown()

    def set_receive_timeout(self, timeout_s: float) -> None:
        """How long the answer being received may go without a byte from now on (its
        `receive` then fails)."""
        try:
            self._sock.settimeout(timeout_s)
        except OSError:  # closed meanwhile: the next receive fails anyway
            pass

    def peer_closed(self) -> bool:
        """Whether the node closed (or wrote unasked to) this idle connection: one taken
        from a pool is checked before a request goes on it, so a node's restart or idle
        timeout does not cost a request that never reached it."""
        if self._closed.is_set():
            return True
        if self.has_buffered_bytes():
            return True
        readable, _, _ = select.select([self._sock], [], [], 0)
        return bool(readable)

    def receive(self, *, timeout_s: float | None = None) -> Iterator[BulkMessage]:
        """The answer's chunks, each whole; BulkFetchError (after the chunks already
        yielded) when the connection fails, or no byte arrives for `timeout_s`; BulkRefused
        when the node refuses the request. Left before its end, the answer closes the
        connection."""
        received = 0
        finished = False
        try:
            if timeout_s is not None:
                self._sock.settimeout(timeout_s)
            while True:
                header = self._receiver.message(bulk_pb2.BulkFetchChunk)
                if header is None:
                    raise ConnectionError("the node closed the connection mid-answer")
                if header.end:
                    if header.error:
                        raise BulkRefused(f"refused: {header.error_message}")
                    finished = True
                    if timeout_s is not None:
                        self._sock.settimeout(None)
                    self._end_span(received, None)
                    return
                records: memoryview | bytes = b""
                if header.records_length:
                    records = memoryview(bytearray(header.records_length))
                    self._receiver.exactly_into(records)
                    received += header.records_length
                yield BulkMessage(header, records)
        except (OSError, ConnectionError, DecodeError, BulkFetchError) as exc:
            finished = True
            self._fail(exc, received)
            if isinstance(exc, BulkFetchError):
                raise
            raise BulkFetchError(f"{self.address}: {exc}") from None
        finally:
            if not finished:  # abandoned mid-answer: the rest of it is still on the wire
                self._abandoned = True
                self._fail(ConnectionError("the answer was abandoned"), received)

    def shutdown(self) -> None:
        """Abandon the answer in flight from another thread: the reader's `recv` returns
        and `receive` raises BulkFetchError."""
        self._abandoned = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self.shutdown()
        try:
            self._sock.close()
        except OSError:
            pass

    def _fail(self, exc: BaseException, received: int) -> None:
        """Close the connection: every answer still awaited on it is lost with this one."""
        logger.debug("bulk connection to %s: %s", self.address, exc)
        self._end_span(received, exc)
        while self._spans:
            self._end_span(0, exc)
        self.close()

    def _start_span(self, name: str, message: bulk_pb2.BulkFetchRequest, node_id: int) -> None:
        """When traced, the request's client span, its context carried to the node in the
        message; it ends with the answer (`_end_span`)."""
        if not self._traced:
            return
        span = tracer.start_span(name, kind=trace.SpanKind.CLIENT)
        if span.is_recording():
            self._spans.append(span)
            span.set_attribute("seglog.node_id", node_id)
            span.set_attribute("net.peer.name", self.address)
            propagate.inject(message.trace_context, context=trace.set_span_in_context(span))

    def _end_span(self, received: int, error: BaseException | None) -> None:
        """The transfer span (bytes, node; its duration is the transfer's) ends with its
        answer."""
        if not self._spans:
            return
        span = self._spans.popleft()
        span.set_attribute("seglog.bytes", received)
        if error is not None and self._abandoned:
            span.set_attribute("seglog.cancelled", True)
        elif error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
        span.end()
