"""SASL SCRAM-SHA-256 and SCRAM-SHA-512 on the Kafka listener (RFC 5802, RFC 7677), checked
against the users' credentials in the registry (cluster/scram_credentials.py), with scramp
doing the exchange's parsing and proofs:

    client-first  n,,n=<user>,r=<client nonce>[,extensions]
    server-first  r=<client nonce + server nonce>,s=<salt, base64>,i=<iterations>
    client-final  c=biws,r=<nonce>,p=<proof, base64>
    server-final  v=<server signature, base64>

Two client messages, no more: a third, or anything after a failure, is refused. The principal
is User:<name>, as Kafka's SCRAM callback names it. An unknown user and a wrong proof fail
alike (Kafka's message, not saying which), and the connection then closes. Kafka's
delegation tokens (the `tokenauth` extension) are not supported: such a client is refused.
"""

from __future__ import annotations

from collections.abc import Callable

import scramp

from seglog.errors import AuthenticationError

from ..cluster.scram_credentials import MECHANISM_TYPES, ScramCredential

SCRAM_MECHANISMS = tuple(MECHANISM_TYPES)
USER_PREFIX = "User:"
# What a client first message can hold: "n,,n=" + a name + ",r=" + a nonce (Kafka's clients
# send 24-32 byte nonces). Names of Kafka users are short; 4 KiB leaves room for both.
MAX_MESSAGE_BYTES = 4096

Credentials = Callable[[], dict[str, dict[str, ScramCredential]]]


class ScramExchange:
    def __init__(self, mechanism: str, credentials: Credentials) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._steps = 0
        self._user: str | None = None

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        credential = self._credentials().get(user, {}).get(self.mechanism)
        if credential is None:
            return None
        self._user = user
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _failed(self) -> AuthenticationError:
        return AuthenticationError(
            "Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {self.mechanism}"
        )

    def step(self, message: bytes) -> tuple[bytes, str | None]:
        """The server's answer to one client message, and the principal once the client has
        proved itself (None after the first message); AuthenticationError if it has not."""
        self._steps += 1
        if self._steps > 2 or len(message) > MAX_MESSAGE_BYTES:
            raise self._failed()
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise self._failed() from None
        try:
            if self._steps == 1:
                if "tokenauth=true" in text.split(","):
                    raise AuthenticationError(
                        "delegation tokens are not supported (SCRAM tokenauth)"
                    )
                self._server.set_client_first(text)
                return self._server.get_server_first().encode(), None
            self._server.set_client_final(text)
            answer = self._server.get_server_final().encode()
        except (scramp.ScramException, ValueError):  # ValueError: bad base64 or encodings
            raise self._failed() from None
        if self._user is None:
            raise self._failed()
        return answer, USER_PREFIX + self._user
