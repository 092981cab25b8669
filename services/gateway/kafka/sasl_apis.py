"""SaslHandshake 0–1 and SaslAuthenticate 0–2 (sasl.py has the mechanisms).

Handshake v1 is followed by SaslAuthenticate requests; v0 (older clients) by one bare SASL
token frame, answered with a bare (empty) frame (connection.py reads it). A failed
authentication answers SASL_AUTHENTICATION_FAILED and the connection is then closed, as
Kafka's broker closes it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

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
from .sasl import MECHANISMS, SaslFailed, authenticate

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


def authenticate_session(core: KafkaCore, session: ConnectionSession, token: bytes) -> None:
    """Authenticates the session with a client's SASL message; AuthenticationError if not."""
    if session.sasl_mechanism is None or session.authenticated_principal is not None:
        raise AuthenticationError("SaslAuthenticate before a SaslHandshake, or twice")
    bearer_token, principal = authenticate(session.sasl_mechanism, token, core.authorization.tokens)
    session.identity = dataclasses.replace(session.identity, bearer_token=bearer_token)
    session.authenticated_principal = principal


def sasl_authenticate(call: KafkaCall, request: Any) -> Any:
    response_class = SaslAuthenticateResponse[call.version]
    try:
        authenticate_session(call.core, call.session, bytes(request.auth_bytes))
    except AuthenticationError as exc:
        raise SaslFailed(
            response_class(
                error_code=SASL_AUTHENTICATION_FAILED,
                error_message=str(exc),
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
        ) from None
    call.attributes["kafka.principal"] = call.principal
    return response_class(
        error_code=NONE, error_message=None, auth_bytes=b"", session_lifetime_ms=0
    )


def register(table: ApiTable) -> None:
    table.register(SaslHandshakeRequest, 0, 1, sasl_handshake)
    table.register(SaslAuthenticateRequest, 0, 2, sasl_authenticate)
