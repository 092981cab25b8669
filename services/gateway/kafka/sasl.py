"""SASL on the Kafka listener: PLAIN and OAUTHBEARER, both carrying a seglog bearer token
(security/tokens.py), so a Kafka client is the same principal as a gRPC client holding the
same token.

- OAUTHBEARER (RFC 7628): the client's first message `n,,\\x01auth=Bearer <token>\\x01\\x01`;
  the token is the bearer token.
- PLAIN (RFC 4616): `authzid \\0 username \\0 password`; the password is the bearer token and
  the username must be the token's principal name (`alice` for a token of `User:alice`), so
  that the name a client is configured with is the name the ACLs see; an authorization id,
  when given, must be the same name.

Either way the token's principal is checked once here and again by every call it makes (the
gRPC path's `principal_of`), so a JWT that expires stops working mid-connection.
"""

from __future__ import annotations

from typing import Any

from seglog.errors import AuthenticationError
from seglog.security.tokens import TokenVerifier

MECHANISMS = ("PLAIN", "OAUTHBEARER")
USER_PREFIX = "User:"


def _plain(auth_bytes: bytes, tokens: TokenVerifier) -> tuple[str, str]:
    parts = auth_bytes.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationError("a PLAIN message is authzid NUL username NUL password")
    authzid, username, password = (part.decode("utf-8", "replace") for part in parts)
    principal = tokens.principal(password)
    name = principal.removeprefix(USER_PREFIX)
    if username != name or (authzid and authzid != name):
        raise AuthenticationError(
            "the PLAIN username must be the token's principal name; the password is the token"
        )
    return password, principal


def _oauthbearer(auth_bytes: bytes, tokens: TokenVerifier) -> tuple[str, str]:
    text = auth_bytes.decode("utf-8", "replace")
    gs2_header, separator, rest = text.partition("\x01")
    if not separator or not gs2_header.startswith(("n,", "y,")):
        raise AuthenticationError("an OAUTHBEARER message opens with a GS2 header (n,,)")
    for pair in rest.split("\x01"):
        key, _, value = pair.partition("=")
        if key == "auth":
            scheme, _, token = value.partition(" ")
            if scheme.lower() != "bearer" or not token:
                raise AuthenticationError("OAUTHBEARER auth is 'Bearer <token>'")
            return token, tokens.principal(token)
    raise AuthenticationError("the OAUTHBEARER message has no auth=Bearer <token>")


def authenticate(
    mechanism: str, auth_bytes: bytes, tokens: TokenVerifier | None
) -> tuple[str, str]:
    """(the bearer token, its principal) for a client's SASL message; AuthenticationError
    when it does not verify."""
    if tokens is None:
        raise AuthenticationError(
            "this gateway verifies no bearer tokens (--token-file or --oauth-jwks-file)"
        )
    if mechanism == "PLAIN":
        return _plain(auth_bytes, tokens)
    if mechanism == "OAUTHBEARER":
        return _oauthbearer(auth_bytes, tokens)
    raise AuthenticationError(f"SASL mechanism {mechanism!r} is not one of {MECHANISMS}")


class SaslFailed(Exception):
    """Authentication failed: the answer is sent, then the connection closed."""

    def __init__(self, response: Any) -> None:
        super().__init__("SASL authentication failed")
        self.response = response
        self.correlation_id: int | None = None  # set by the connection that sends it
