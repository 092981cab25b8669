"""One client connection to the Kafka listener: read a request, answer it, read the next.

One request at a time per connection, as Kafka's broker does (it mutes a channel while a
request is in flight), so responses go out in request order and a connection holds at most
one request's memory: its frame (bounded by socket.request.max.bytes) and its answer.

What closes the connection, as Kafka's broker closes it: a frame size outside the bound, a
header or body that does not parse, an api key the listener does not serve, a version
outside the advertised range (ApiVersions apart: it answers v0 with UNSUPPORTED_VERSION and
the table, so a newer client learns what to use), on a SASL listener any request but
ApiVersions and the SASL APIs before authenticating, a failed authentication (after its
answer), a handler failing unexpectedly. None of these reach past this connection.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span

from seglog.errors import AuthenticationError, MemoryBudgetExhaustedError
from seglog.semconv import TOPIC
from services.memory_pool import RequestShare

from .api_table import ApiEntry, ApiTable
from .api_versions_apis import versions_response
from .error_codes import UNSUPPORTED_VERSION
from .framing import (
    API_KEY_AND_VERSION,
    API_VERSIONS_KEY,
    SIZE,
    FrameError,
    RequestFrame,
    decode_body,
    encode_response,
    parse_request,
    read_frame,
)
from .kafka_call import ConnectionIdentity, ConnectionSession, KafkaCall
from .sasl_apis import SaslFailed, authenticate_session

if TYPE_CHECKING:
    from ..server import Gateway

logger = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
# What a SASL listener serves before the client has authenticated.
BEFORE_AUTHENTICATION = {API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY}
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# Queued requests of one api answered together (produce_coalescing.py): librdkafka keeps up
# to a million in flight without idempotence.
MAX_QUEUED_REQUESTS = 64
_API_KEY = struct.Struct(">h")
# RFC 2253's short names for the subject DN handed to ssl.principal.mapping.rules.
_DN_NAMES = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "domainComponent": "DC",
    "userId": "UID",
}


def certificate_identity(sock: ssl.SSLSocket) -> tuple[str | None, str | None]:
    """(common name, subject DN most specific first, as gRPC gives it) of the verified peer
    certificate; (None, None) without one."""
    certificate = sock.getpeercert()
    if not certificate:
        return None, None
    # getpeercert's subject: relative DNs in certificate order, each ((name, value), ...).
    subject_rdns: Any = certificate.get("subject", ())
    attributes: list[tuple[str, str]] = [
        (str(pair[0]), str(pair[1])) for rdn in subject_rdns for pair in rdn
    ]
    common_names = [value for name, value in attributes if name == "commonName"]
    subject = ",".join(
        f"{_DN_NAMES.get(name, name)}={value}" for name, value in reversed(attributes)
    )
    return (common_names[-1] if common_names else None), subject


class KafkaConnection:
    def __init__(
        self,
        sock: socket.socket,
        identity: ConnectionIdentity,
        table: ApiTable,
        gateway: Gateway,
        *,
        max_request_bytes: int,
        tracer: trace.Tracer,
        sasl_required: bool = False,
        advertised_address: str,
    ) -> None:
        self.sock = sock
        self.session = ConnectionSession(identity, advertised_address, sasl_required=sasl_required)
        self.table = table
        self.gateway = gateway
        self.max_request_bytes = max_request_bytes
        self.tracer = tracer

    @property
    def peer(self) -> str:
        identity = self.session.identity
        return f"{identity.peer_host}:{identity.peer_port}"

    def serve(self) -> None:
        """Answers requests until the client closes, a request is refused, or the socket
        fails (shut down by the listener's stop, or idle past its timeout)."""
        try:
            if isinstance(self.sock, ssl.SSLSocket):
                self._tls_handshake(self.sock)
            while True:
                muted_s = self.session.muted_until - time.monotonic()
                if muted_s > 0:
                    time.sleep(muted_s)  # over a client quota: KIP-219's mute
                # The request's bytes, and its answer's, are held from the gateway's pool
                # until the answer is sent (request_memory.py); a full pool mutes the
                # connection before the body is read.
                with self.gateway.request_memory.holding() as share:
                    payload = read_frame(self.sock, self.max_request_bytes, share.acquire)
                    if payload is None:
                        return
                    if self.session.raw_sasl_token_next:
                        self._raw_sasl_token(payload)
                        continue
                    queued = self._queued_with(payload, share)
                    if len(queued) > 1:
                        answers = self._answer_queued(queued)
                        share.add(sum(len(a) for a in answers))
                        for queued_answer in answers:
                            self.sock.sendall(queued_answer)
                        continue
                    answer = self._answer(payload)
                    if answer is not None:
                        share.add(len(answer))
                        self.sock.sendall(answer)
        except MemoryBudgetExhaustedError as exc:
            logger.info("closing Kafka connection from %s unread: %s", self.peer, exc)
        except SaslFailed as failed:
            logger.info("Kafka connection from %s failed to authenticate", self.peer)
            self._send_quietly(failed)
        except FrameError as exc:
            logger.info("closing Kafka connection from %s: %s", self.peer, exc)
        except OSError as exc:
            logger.debug("Kafka connection from %s ended: %s", self.peer, exc)
        except Exception:
            logger.exception("closing Kafka connection from %s: request failed", self.peer)
        finally:
            self.sock.close()

    def _tls_handshake(self, sock: ssl.SSLSocket) -> None:
        timeout = sock.gettimeout()
        sock.settimeout(TLS_HANDSHAKE_TIMEOUT_S)
        sock.do_handshake()
        sock.settimeout(timeout)
        common_name, subject = certificate_identity(sock)
        identity = self.session.identity
        self.session.identity = ConnectionIdentity(
            identity.peer_host,
            identity.peer_port,
            certificate_common_name=common_name,
            certificate_subject=subject,
        )

    def _raw_sasl_token(self, token: bytearray) -> None:
        """SaslHandshake v0's exchange: a bare token, answered by a bare empty frame on
        success; a failure closes the connection (v0 has no way to say why)."""
        self.session.raw_sasl_token_next = False
        try:
            authenticate_session(self.gateway, self.session, bytes(token))
        except AuthenticationError as exc:
            raise FrameError(f"SASL authentication failed: {exc}") from None
        self.sock.sendall(SIZE.pack(0))

    def _send_quietly(self, failed: SaslFailed) -> None:
        if failed.correlation_id is None:
            return
        try:
            self.sock.sendall(encode_response(failed.response, failed.correlation_id))
        except OSError:
            pass

    def _queued_with(self, payload: bytearray, share: RequestShare) -> list[bytearray]:
        """`payload` and the requests of the same api queued right behind it, when its api
        answers several at once (Produce): they are already sent, so reading them now does
        not wait on the client. Up to MAX_QUEUED_REQUESTS and socket.request.max.bytes in
        all, and only while the gateway's request pool has room for them without waiting
        (a connection never waits holding memory); not under TLS, whose buffered bytes a
        peek does not see."""
        api_key, api_version = API_KEY_AND_VERSION.unpack_from(payload)
        entry = self.table.entry(api_key)
        if (
            entry is None
            or entry.batch_handler is None
            or not entry.serves(api_version)
            or not self.session.authenticated
            or isinstance(self.sock, ssl.SSLSocket)
        ):
            return [payload]
        queued, total_bytes = [payload], len(payload)
        while len(queued) < MAX_QUEUED_REQUESTS:
            size = self._next_request_size(api_key)
            if size is None or size > self.max_request_bytes or not share.try_acquire(size):
                break
            following = read_frame(self.sock, self.max_request_bytes)
            if following is None:
                break
            queued.append(following)
            total_bytes += len(following)
            if total_bytes >= self.max_request_bytes:
                break
        return queued

    def _next_request_size(self, api_key: int) -> int | None:
        """The size of the next request if it is already here and of `api_key`."""
        readable, _, _ = select.select([self.sock], [], [], 0)
        if not readable:
            return None
        head = self.sock.recv(SIZE.size + 2, socket.MSG_PEEK)
        if len(head) < SIZE.size + 2:
            return None
        (size,) = SIZE.unpack_from(head)
        (next_key,) = _API_KEY.unpack_from(head, SIZE.size)
        return int(size) if next_key == api_key else None

    def _answer_queued(self, payloads: list[bytearray]) -> list[bytearray]:
        """Several queued requests of one api (checked by `_queued_with`): each parsed and
        checked as alone, then answered together by the api's batch handler. One that does
        not parse closes the connection, as alone, before any of them is acted on."""
        entry = self.table.entry(API_KEY_AND_VERSION.unpack_from(payloads[0])[0])
        assert entry is not None and entry.batch_handler is not None
        frames, requests, calls = [], [], []
        for payload in payloads:
            frame = parse_request(payload, entry.request_class)
            if not entry.serves(frame.api_version):
                raise FrameError(f"{entry.name} v{frame.api_version} is not served")
            frames.append(frame)
            requests.append(decode_body(entry.request_class, frame))
            calls.append(self._call(entry, frame))
        with self._span(entry, frames[0], calls[0]) as span:
            span.set_attribute("kafka.requests", len(payloads))
            responses = entry.batch_handler(calls, requests)
        return [
            encode_response(response, frame.correlation_id)
            for response, frame in zip(responses, frames, strict=True)
            if response is not None
        ]

    def _answer(self, payload: bytearray) -> bytearray | None:
        api_key, api_version = API_KEY_AND_VERSION.unpack_from(payload)
        entry = self.table.entry(api_key)
        if entry is None:
            raise FrameError(f"api key {api_key} is not served")
        if not self.session.authenticated and api_key not in BEFORE_AUTHENTICATION:
            raise FrameError(f"{entry.name} before SASL authentication")
        frame = parse_request(payload, entry.request_class)
        if not entry.serves(api_version):
            if api_key == API_VERSIONS_KEY:
                refusal = versions_response(self.table, 0, UNSUPPORTED_VERSION)
                return encode_response(refusal, frame.correlation_id)
            raise FrameError(
                f"{entry.name} v{api_version} is not served (v{entry.min_version}.."
                f"v{entry.max_version} are)"
            )
        request = decode_body(entry.request_class, frame)
        try:
            response = self._handle(entry, frame, request)
        except SaslFailed as failed:
            failed.correlation_id = frame.correlation_id
            raise
        if response is None:
            return None
        return encode_response(response, frame.correlation_id)

    def _call(self, entry: ApiEntry, frame: RequestFrame) -> KafkaCall:
        return KafkaCall(
            self.gateway,
            entry.api_key,
            frame.api_version,
            frame.correlation_id,
            frame.client_id,
            self.session,
        )

    @contextmanager
    def _span(self, entry: ApiEntry, frame: RequestFrame, call: KafkaCall) -> Iterator[Span]:
        """The request's span, `kafka.<Api>`, with the attributes its handler set."""
        with self.tracer.start_as_current_span(
            f"kafka.{entry.name}", kind=trace.SpanKind.SERVER
        ) as span:
            span.set_attribute("kafka.api_version", frame.api_version)
            span.set_attribute("kafka.client_id", frame.client_id or "")
            span.set_attribute("net.peer.ip", self.session.identity.peer_host)
            span.set_attribute("kafka.principal", call.principal)
            try:
                yield span
            finally:
                for key, value in call.attributes.items():
                    span.set_attribute(key, value)
                topics = call.attributes.get("kafka.topics")
                if isinstance(topics, str) and topics and "," not in topics and topics != "*":
                    span.set_attribute(TOPIC, topics)  # one topic: named as the metrics name it

    def _handle(self, entry: ApiEntry, frame: RequestFrame, request: Any) -> Any:
        call = self._call(entry, frame)
        with self._span(entry, frame, call):
            return entry.handler(call, request)
