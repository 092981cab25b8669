"""One Kafka request as its handler sees it: the connection's session, the core objects it
calls (`core`, kafka/core.py) and who the call is from (`caller`, a broker Caller: the SASL
principal, else the client certificate's, else User:ANONYMOUS), which the core authorizes.
No gRPC on this path: a handler calls the core's typed methods with `caller`, and the core
raises SeglogErrors the handler turns into Kafka's codes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seglog.errors import AuthenticationError

from ..authorization import certificate_principal
from ..broker.caller import Caller
from .node_lanes import NO_NODE, ListenerSide, NodeAddress

if TYPE_CHECKING:
    from .core import KafkaCore
    from .fetch_sessions import FetchSessionCache


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
    # The node whose lane the connection came in on (NO_NODE: the listener's own port, when
    # it is no node's): which broker the client thinks it is
    # talking to (brokers.py), for the requests a Kafka broker answers for itself.
    lane: int = NO_NODE


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
    # Each node's broker address on the client's listener (None: the gateway's listener's).
    node_address: NodeAddress | None = None
    # Past a client quota, the connection reads no request before this (time.monotonic()):
    # KIP-219's mute, after the answer that says throttle_time_ms went out.
    muted_until: float = 0.0
    # The listener's clients' fetch sessions (fetch_sessions.py); None: none are kept.
    fetch_sessions: FetchSessionCache | None = None

    @property
    def authenticated(self) -> bool:
        return not self.sasl_required or self.authenticated_principal is not None


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

    @property
    def listener(self) -> ListenerSide:
        """The client's listener, as brokers.py names brokers to it."""
        return ListenerSide(self.session.advertised_address, self.session.node_address)

    def allowed(self, operation: str, resource_type: str, name: str) -> bool:
        """Whether this call's caller may `operation` the resource (always, with the
        authorizer off): for APIs that filter what they show rather than refuse (Metadata)."""
        return self.core.authorization.allows(self.caller, operation, resource_type, name)
