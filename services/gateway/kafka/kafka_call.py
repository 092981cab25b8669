"""One Kafka request as its handler sees it: the connection's session, the core objects it
calls (`core`, kafka/core.py) and who the call is from (`caller`, a broker Caller: the SASL
principal, else the client certificate's, else User:ANONYMOUS), which the core authorizes.

`KafkaCall.invoke` is what is left of the old way in, for the APIs not on the typed core yet
(Produce, Fetch, ListOffsets, the reassignment APIs): it runs a gRPC servicer method of the
gateway in this process, wrapped by `authorization.guard` as the gRPC server wraps it, with
a stand-in for grpc.ServicerContext that carries the connection's identity; a servicer's
abort comes back as the SeglogError it aborted with. It goes when they have moved.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, cast

import grpc
from google.rpc import error_details_pb2, status_pb2

from seglog import errors
from seglog.errors import AuthenticationError, SeglogError
from seglog.rpc.client_id import CLIENT_ID_METADATA
from seglog.rpc.status import DOMAIN

from ..authorization import certificate_principal
from ..broker.caller import Caller

if TYPE_CHECKING:
    from .core import KafkaCore

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_CLASSES = errors.error_classes()


@dataclass(frozen=True)
class ConnectionIdentity:
    """Who is at the other end of a Kafka connection, as far as the listener knows."""

    peer_host: str
    peer_port: int
    # The verified client certificate's common name and subject DN (mutual TLS).
    certificate_common_name: str | None = None
    certificate_subject: str | None = None
    # A SASL PLAIN password or OAUTHBEARER token: a seglog bearer token (security/tokens.py).
    bearer_token: str | None = None
    # The principal a SASL SCRAM exchange proved (no token to carry it: sasl_scram.py).
    sasl_principal: str | None = None
    # The listener lane the connection came in on: which broker the client thinks it is
    # talking to (brokers.py), for the requests a Kafka broker answers for itself.
    lane: int = 0


@dataclass
class ConnectionSession:
    """A connection's state across its requests: who it is, and where its SASL exchange
    stands on a SASL listener (only ApiVersions and the SASL APIs are served before it
    authenticates, as Kafka's broker does)."""

    identity: ConnectionIdentity
    # The listener's advertised host:port: Metadata names it to this connection's client.
    advertised_address: str
    sasl_required: bool = False
    sasl_mechanism: str | None = None  # chosen by SaslHandshake
    # After SaslHandshake v0 the next frame is a bare SASL token, not a Kafka request.
    raw_sasl_token_next: bool = False
    authenticated_principal: str | None = None
    # A multi-message SASL exchange under way (SCRAM's: sasl_scram.ScramExchange).
    sasl_exchange: Any = None
    certificate_principal: str | None = None  # worked out once, by KafkaCall.principal
    # Past a client quota, the connection reads no request before this (time.monotonic()):
    # KIP-219's mute, after the answer that says throttle_time_ms went out.
    muted_until: float = 0.0

    @property
    def authenticated(self) -> bool:
        return not self.sasl_required or self.authenticated_principal is not None


class _Aborted(Exception):
    def __init__(self, error: SeglogError) -> None:
        super().__init__(str(error))
        self.error = error


def _error_from_status(status: grpc.Status) -> SeglogError:
    """The SeglogError behind `seglog.rpc.status.abort`'s status (its ErrorInfo's reason)."""
    message = status.details or ""
    for key, value in status.trailing_metadata or ():
        if key != _STATUS_DETAILS_KEY:
            continue
        details = status_pb2.Status.FromString(value)
        for detail in details.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and info.domain == DOMAIN:
                error = _ERROR_CLASSES.get(str(info.reason), SeglogError)(details.message)
                error.details = {k: v for k, v in info.metadata.items() if k != "retriable"}
                return error
    return SeglogError(message or status.code.name)


class _ServicerContext:
    """What the gateway's servicers and `Authorization` use of a grpc.ServicerContext."""

    def __init__(
        self,
        identity: ConnectionIdentity,
        session: ConnectionSession | None = None,
        client_id: str | None = None,
    ) -> None:
        self._identity = identity
        self._session = session
        self._client_id = client_id
        self._callbacks: list[Callable[[], None]] = []
        self._finished = False
        self._lock = threading.Lock()  # servicer threads (fetch pumps) add callbacks

    @property
    def sasl_principal(self) -> str | None:
        """The SCRAM-proved principal (authorization.principal_of takes it as proved)."""
        return self._identity.sasl_principal

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        metadata: tuple[tuple[str, str], ...] = ()
        if self._client_id:
            metadata += ((CLIENT_ID_METADATA, self._client_id),)
        if self._identity.bearer_token is None:
            return metadata
        return (*metadata, ("authorization", f"Bearer {self._identity.bearer_token}"))

    def defer_throttle(self, throttle_ms: int) -> bool:
        """Throttle the Kafka way (KIP-219): the answer goes at once, saying throttle_time_ms,
        and the connection is muted that long after it; False outside a connection."""
        if self._session is None:
            return False
        until = time.monotonic() + throttle_ms / 1000
        self._session.muted_until = max(self._session.muted_until, until)
        return True

    def peer(self) -> str:
        host = self._identity.peer_host
        return (
            f"ipv6:[{host}]:{self._identity.peer_port}"
            if ":" in host
            else (f"ipv4:{host}:{self._identity.peer_port}")
        )

    def auth_context(self) -> dict[str, list[bytes]]:
        identity = self._identity
        if identity.certificate_common_name is None:
            return {}
        context = {"x509_common_name": [identity.certificate_common_name.encode()]}
        if identity.certificate_subject is not None:
            context["x509_subject"] = [identity.certificate_subject.encode()]
        return context

    def abort_with_status(self, status: grpc.Status) -> NoReturn:
        raise _Aborted(_error_from_status(status))

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        error = (
            errors.InvalidRequestError
            if code == grpc.StatusCode.INVALID_ARGUMENT
            else (SeglogError)
        )
        raise _Aborted(error(details or code.name))

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """Runs `callback` when the call ends; at once when it has ended already (a fetch
        pump that started its node call just after the Kafka answer was complete: its call
        is cancelled rather than left to run out its long poll, which closing the servicer
        waits for)."""
        with self._lock:
            if not self._finished:
                self._callbacks.append(callback)
                return True
        callback()
        return False

    def is_active(self) -> bool:
        return not self._finished

    def time_remaining(self) -> float | None:
        return None

    def set_code(self, code: grpc.StatusCode) -> None:
        pass

    def set_details(self, details: str) -> None:
        pass

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass

    def finish(self) -> None:
        with self._lock:
            self._finished = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


@dataclass
class KafkaCall:
    core: KafkaCore
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    session: ConnectionSession
    # Attributes for the request's span (topics named, ...), set by handlers.
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def identity(self) -> ConnectionIdentity:
        return self.session.identity

    @property
    def throttle_time_ms(self) -> int:
        """What the answer says in throttle_time_ms: how long the connection stays muted
        for being over a client quota (routing/quotas.py), 0 when it is not."""
        return max(0, int((self.session.muted_until - time.monotonic()) * 1000))

    @property
    def principal(self) -> str:
        """Who the connection is, as the authorizer names it: the SASL token's principal, else
        the client certificate's (through the mapping rules), else User:ANONYMOUS."""
        session = self.session
        if session.authenticated_principal is not None:
            return session.authenticated_principal
        if session.certificate_principal is None:
            identity = session.identity
            try:
                session.certificate_principal = certificate_principal(
                    identity.certificate_common_name,
                    identity.certificate_subject,
                    self.core.authorization.mapper,
                )
            except AuthenticationError:
                return ""
        return session.certificate_principal

    @property
    def caller(self) -> Caller:
        """The call's caller as the broker core takes it (broker/caller.py)."""
        return Caller(self.principal, self.identity.peer_host, self.client_id, "kafka")

    @property
    def advertised_address(self) -> str:
        """This gateway's address as the client's listener advertises it."""
        return self.session.advertised_address

    def invoke(self, method_name: str, servicer_method: Callable[..., Any], request: Any) -> Any:
        """The gateway's gRPC method `method_name` run here on `request` (a proto message, or
        the wire bytes for Produce and Fetch), authorized as the gRPC server authorizes it.
        A streaming method's messages come back as a list. Raises the SeglogError the
        servicer or the authorizer aborted with."""
        context = _ServicerContext(self.identity, self.session, self.client_id)
        guarded = self.core.authorization.guard(method_name, servicer_method)
        try:
            answer = guarded(request, cast(grpc.ServicerContext, context))
            if isinstance(answer, Iterator):
                return list(answer)
            return answer
        except _Aborted as aborted:
            raise aborted.error from None
        finally:
            context.finish()

    def invoke_stream(
        self, method_name: str, servicer_method: Callable[..., Any], request: Any
    ) -> Generator[Any, None, None]:
        """`invoke` for a streaming method, its messages as they come: closing the iterator
        early ends the call as a client's cancellation does (what the servicer registered
        with `add_callback` runs, so its calls to the nodes are cancelled)."""
        context = _ServicerContext(self.identity, self.session, self.client_id)
        guarded = self.core.authorization.guard(method_name, servicer_method)
        answer: Any = None
        try:
            answer = guarded(request, cast(grpc.ServicerContext, context))
            # Not `yield from`: closing this generator would close the servicer's first,
            # before the callbacks below have cancelled what its close waits for.
            messages = iter(answer)
            while True:
                try:
                    message = next(messages)
                except StopIteration:
                    return
                yield message
        except _Aborted as aborted:
            raise aborted.error from None
        finally:
            # The callbacks first, as gRPC runs them when a client cancels: they cancel the
            # servicer's calls to the nodes, which closing the servicer's generator waits for.
            context.finish()
            close = getattr(answer, "close", None)
            if close is not None:
                close()

    def allowed(self, operation: str, resource_type: str, name: str) -> bool:
        """Whether this call's caller may `operation` the resource (always, with the
        authorizer off): for APIs that filter what they show rather than refuse (Metadata)."""
        return self.core.authorization.allows(self.caller, operation, resource_type, name)
