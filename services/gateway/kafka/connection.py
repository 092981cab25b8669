"""One client connection to the Kafka listener: read a request, answer it, read the next.

One request at a time per connection, as Kafka's broker does (it mutes a channel while a
request is in flight), so responses go out in request order and a connection holds at most
one request's memory: its frame (bounded by socket.request.max.bytes) and its answer.

What closes the connection, as Kafka's broker closes it: a frame size outside the bound, a
header or body that does not parse, an api key the listener does not serve, a version
outside the advertised range (ApiVersions apart: it answers v0 with UNSUPPORTED_VERSION and
the table, so a newer client learns what to use), a handler failing unexpectedly. None of
these reach past this connection.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from .api_table import ApiEntry, ApiTable
from .api_versions_apis import versions_response
from .error_codes import UNSUPPORTED_VERSION
from .framing import (
    API_KEY_AND_VERSION,
    API_VERSIONS_KEY,
    FrameError,
    RequestFrame,
    decode_body,
    encode_response,
    parse_request,
    read_frame,
)
from .kafka_call import ConnectionIdentity, KafkaCall

if TYPE_CHECKING:
    from ..server import Gateway

logger = logging.getLogger(__name__)


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
    ) -> None:
        self.sock = sock
        self.identity = identity
        self.table = table
        self.gateway = gateway
        self.max_request_bytes = max_request_bytes
        self.tracer = tracer

    def serve(self) -> None:
        """Answers requests until the client closes, a request is refused, or the socket
        fails (shut down by the listener's stop, or idle past its timeout)."""
        peer = f"{self.identity.peer_host}:{self.identity.peer_port}"
        try:
            while True:
                payload = read_frame(self.sock, self.max_request_bytes)
                if payload is None:
                    return
                answer = self._answer(payload)
                if answer is not None:
                    self.sock.sendall(answer)
        except FrameError as exc:
            logger.info("closing Kafka connection from %s: %s", peer, exc)
        except OSError as exc:
            logger.debug("Kafka connection from %s ended: %s", peer, exc)
        except Exception:
            logger.exception("closing Kafka connection from %s: request failed", peer)
        finally:
            self.sock.close()

    def _answer(self, payload: bytes) -> bytes | None:
        api_key, api_version = API_KEY_AND_VERSION.unpack_from(payload)
        entry = self.table.entry(api_key)
        if entry is None:
            raise FrameError(f"api key {api_key} is not served")
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
        response = self._handle(entry, frame, request)
        if response is None:
            return None
        return encode_response(response, frame.correlation_id)

    def _handle(self, entry: ApiEntry, frame: RequestFrame, request: Any) -> Any:
        call = KafkaCall(
            self.gateway,
            entry.api_key,
            frame.api_version,
            frame.correlation_id,
            frame.client_id,
            self.identity,
        )
        with self.tracer.start_as_current_span(
            f"kafka.{entry.name}", kind=trace.SpanKind.SERVER
        ) as span:
            span.set_attribute("kafka.api_version", frame.api_version)
            span.set_attribute("kafka.client_id", frame.client_id or "")
            span.set_attribute("net.peer.ip", self.identity.peer_host)
            try:
                return entry.handler(call, request)
            finally:
                for key, value in call.attributes.items():
                    span.set_attribute(key, value)
