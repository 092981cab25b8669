"""One client connection's requests as the Kafka listener answers them: a handler thread
(handler_pool.py) gives `handle` the frames the connection's network thread read
(channel.py) and gets back the answers to send, and whether to close the connection after.

One request at a time per connection, as Kafka's broker does (it mutes a channel while a
request is in flight), so responses go out in request order and a connection holds at most
one request's memory: its frame (bounded by socket.request.max.bytes) and its answer. A
handler may answer later (later.py): the request's outcome is then a PendingAnswer, and the
connection stays muted until its answer is built and sent.

What closes the connection, as Kafka's broker closes it: a frame size outside the bound, a
header or body that does not parse, an api key the listener does not serve, a version
outside the advertised range (ApiVersions apart: it answers v0 with UNSUPPORTED_VERSION and
the table, so a newer client learns what to use), on a SASL listener any request but
ApiVersions and the SASL APIs before authenticating, a failed authentication (after its
answer), a handler failing unexpectedly. None of these reach past this connection.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span

from seglog.errors import AuthenticationError
from seglog.semconv import TOPIC

from .api_table import ApiEntry, ApiTable
from .api_versions_apis import versions_response
from .error_codes import UNSUPPORTED_VERSION
from .fetch_sessions import FetchSessionCache
from .framing import (
    API_KEY_AND_VERSION,
    API_VERSIONS_KEY,
    SIZE,
    FrameError,
    RequestFrame,
    ScatteredFrame,
    decode_body,
    encode_response,
    parse_request,
)
from .kafka_call import ConnectionIdentity, ConnectionSession, KafkaCall
from .later import Later
from .node_lanes import NodeAddress
from .sasl import SaslFailed
from .sasl_apis import authenticate_session

if TYPE_CHECKING:
    from .core import KafkaCore

logger = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
# What a SASL listener serves before the client has authenticated.
BEFORE_AUTHENTICATION = {API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY}
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


@dataclass
class Outcome:
    """What a request's handling leaves to send: its answers (framed), and whether the
    connection closes once they are sent; or its answer to come (`later`)."""

    answers: list[bytearray | ScatteredFrame] = field(default_factory=list)
    close: bool = False
    later: PendingAnswer | None = None


class PendingAnswer:
    """A request's answer to come (later.py), with what framing it needs."""

    def __init__(self, later: Later[Any], correlation_id: int, peer: str) -> None:
        self.later = later
        self.correlation_id = correlation_id
        self.peer = peer

    def when_done(
        self, deliver: Callable[[Outcome], None], run: Callable[[Callable[[], None]], object]
    ) -> None:
        """Once the core's future is done (not cancelled): `run` (a request handler) builds
        the answer and `deliver`s it. Called at once if it is done already."""

        def finish() -> None:
            deliver(self.outcome())

        def done(future: Future[Any]) -> None:
            if not future.cancelled():
                run(finish)

        self.later.future.add_done_callback(done)

    def outcome(self) -> Outcome:
        try:
            return Outcome([encode_response(self.later.response(), self.correlation_id)])
        except Exception:
            logger.exception("closing Kafka connection from %s: request failed", self.peer)
            return Outcome(close=True)

    def cancel(self) -> None:
        """The connection is gone: the core's wait is given up."""
        self.later.future.cancel()


class KafkaConnection:
    def __init__(
        self,
        identity: ConnectionIdentity,
        table: ApiTable,
        core: KafkaCore,
        *,
        tracer: trace.Tracer,
        sasl_required: bool = False,
        advertised_address: str,
        node_address: NodeAddress | None = None,
        fetch_sessions: FetchSessionCache | None = None,
    ) -> None:
        self.session = ConnectionSession(
            identity,
            advertised_address,
            sasl_required=sasl_required,
            node_address=node_address,
            fetch_sessions=fetch_sessions,
        )
        self.table = table
        self.core = core
        self.tracer = tracer

    @property
    def peer(self) -> str:
        identity = self.session.identity
        return f"{identity.peer_host}:{identity.peer_port}"

    def verified_by_tls(self, sock: ssl.SSLSocket) -> None:
        """The TLS handshake is done: the client certificate's identity, if any, is this
        connection's."""
        common_name, subject = certificate_identity(sock)
        identity = self.session.identity
        self.session.identity = ConnectionIdentity(
            identity.peer_host,
            identity.peer_port,
            certificate_common_name=common_name,
            certificate_subject=subject,
        )

    def handle(self, frames: list[bytearray], raw_sasl_token: bool = False) -> Outcome:
        """Answers one request, or several queued requests of an api that answers them
        together (the channel read them only then), or SaslHandshake v0's bare token."""
        try:
            if raw_sasl_token:
                return Outcome([self._raw_sasl_token(frames[0])])
            if len(frames) > 1:
                return Outcome(self._answer_queued(frames))
            answer = self._answer(frames[0])
            if isinstance(answer, PendingAnswer):
                return Outcome(later=answer)
            return Outcome([] if answer is None else [answer])
        except SaslFailed as failed:
            logger.info("Kafka connection from %s failed to authenticate", self.peer)
            if failed.correlation_id is None:
                return Outcome(close=True)
            return Outcome([encode_response(failed.response, failed.correlation_id)], close=True)
        except FrameError as exc:
            logger.info("closing Kafka connection from %s: %s", self.peer, exc)
        except Exception:
            logger.exception("closing Kafka connection from %s: request failed", self.peer)
        return Outcome(close=True)

    def batches(self, api_key: int, api_version: int) -> bool:
        """Whether requests of this api and version, queued behind one another, are answered
        together (Produce's coalescing): only once authenticated."""
        entry = self.table.entry(api_key)
        return (
            entry is not None
            and entry.batch_handler is not None
            and entry.serves(api_version)
            and self.session.authenticated
        )

    def _raw_sasl_token(self, token: bytearray) -> bytearray:
        """SaslHandshake v0's exchange: a bare token, answered by a bare empty frame on
        success; a failure closes the connection (v0 has no way to say why)."""
        self.session.raw_sasl_token_next = False
        try:
            answer = authenticate_session(self.core, self.session, bytes(token))
        except AuthenticationError as exc:
            raise FrameError(f"SASL authentication failed: {exc}") from None
        # SCRAM's first message: the client's next frame is again a bare token.
        self.session.raw_sasl_token_next = self.session.authenticated_principal is None
        return bytearray(SIZE.pack(len(answer)) + answer)

    def _answer_queued(self, payloads: list[bytearray]) -> list[bytearray | ScatteredFrame]:
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

    def _answer(self, payload: bytearray) -> bytearray | ScatteredFrame | PendingAnswer | None:
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
        if response is None or isinstance(response, ScatteredFrame):
            return response  # a handler's own framing (fetch_encoding.py)
        if isinstance(response, Later):
            return PendingAnswer(response, frame.correlation_id, self.peer)
        return encode_response(response, frame.correlation_id)

    def _call(self, entry: ApiEntry, frame: RequestFrame) -> KafkaCall:
        return KafkaCall(
            self.core,
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
