"""SaslHandshake 0–1 and SaslAuthenticate 0–2 (sasl.py has PLAIN and OAUTHBEARER, one
message each; sasl_scram.py SCRAM-SHA-256/512, two messages, each answered with the server's
SCRAM message in auth_bytes: the connection is authenticated after the second).

Handshake v1 is followed by SaslAuthenticate requests; v0 (older clients) by one bare SASL
token frame, answered with a bare (empty) frame (connection.py reads it). A failed
authentication answers SASL_AUTHENTICATION_FAILED and the connection is then closed, as
Kafka's broker closes it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from seglog.errors import AuthenticationError

from .api_table import ApiTable
from .error_codes import (
    ILLEGAL_SASL_STATE,
    NONE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
)
from .kafka_call import ConnectionSession, KafkaCall
from .sasl import MECHANISMS as TOKEN_MECHANISMS
from .sasl import SaslFailed, authenticate
from .sasl_scram import SCRAM_MECHANISMS, ScramExchange

MECHANISMS = (*TOKEN_MECHANISMS, *SCRAM_MECHANISMS)

if TYPE_CHECKING:
    from .core import KafkaCore


def sasl_handshake(call: KafkaCall, request: Any) -> Any:
    response_class = SaslHandshakeResponse[call.version]
    session = call.session
    # Not a SASL listener, or a second handshake: Kafka's broker answers the same.
    if not session.sasl_required or session.sasl_mechanism is not None:
        return response_class(error_code=ILLEGAL_SASL_STATE, mechanisms=list(MECHANISMS))
    if request.mechanism not in MECHANISMS:
        return response_class(error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=list(MECHANISMS))
    session.sasl_mechanism = request.mechanism
    session.raw_sasl_token_next = call.version == 0
    return response_class(error_code=NONE, mechanisms=list(MECHANISMS))


def authenticate_session(core: KafkaCore, session: ConnectionSession, token: bytes) -> bytes:
    """Takes a client's SASL message: the server's answer to it (the session authenticated
    when the mechanism's exchange is complete); AuthenticationError if it does not verify."""
    if session.sasl_mechanism is None or session.authenticated_principal is not None:
        raise AuthenticationError("SaslAuthenticate before a SaslHandshake, or twice")
    if session.sasl_mechanism in SCRAM_MECHANISMS:
        return _scram_step(core, session, token)
    bearer_token, principal = authenticate(session.sasl_mechanism, token, core.authorization.tokens)
    session.identity = dataclasses.replace(session.identity, bearer_token=bearer_token)
    session.authenticated_principal = principal
    return b""


def _scram_step(core: KafkaCore, session: ConnectionSession, token: bytes) -> bytes:
    exchange = session.sasl_exchange
    if exchange is None:
        registry = core.registry
        exchange = ScramExchange(session.sasl_mechanism or "", lambda: registry.scram_credentials)
        session.sasl_exchange = exchange
    answer, principal = cast(ScramExchange, exchange).step(token)
    if principal is not None:
        session.sasl_exchange = None
        session.authenticated_principal = principal
    return answer


def sasl_authenticate(call: KafkaCall, request: Any) -> Any:
    response_class = SaslAuthenticateResponse[call.version]
    try:
        answer = authenticate_session(call.core, call.session, bytes(request.auth_bytes))
    except AuthenticationError as exc:
        raise SaslFailed(
            response_class(
                error_code=SASL_AUTHENTICATION_FAILED,
                error_message=str(exc),
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
        ) from None
    if call.session.authenticated_principal is not None:
        call.attributes["kafka.principal"] = call.principal
    return response_class(
        error_code=NONE, error_message=None, auth_bytes=answer, session_lifetime_ms=0
    )


def register(table: ApiTable) -> None:
    table.register(SaslHandshakeRequest, 0, 1, sasl_handshake)
    table.register(SaslAuthenticateRequest, 0, 2, sasl_authenticate)
