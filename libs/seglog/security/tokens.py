"""Bearer tokens, the role Kafka's SASL/OAUTHBEARER plays: a client sends
`authorization: Bearer <token>` in its call metadata (over TLS), and the gateway maps it to a
principal `User:<name>`.

Two kinds of verifier, either or both:
- a JWT key set (`--oauth-jwks-file`, a JSON Web Key Set): the token must be a JWT signed by
  one of its keys (RS256/ES256, chosen by the token's `kid`), not expired, for the configured
  audience when one is set; its `sub` is the principal's name;
- a static token file (`--token-file`) for small setups: one `<token> <name>` per line
  (`#` comments), the file read again when it changes.

The token itself is never logged or put on a span; only the principal is.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from ..errors import AuthenticationError

ALGORITHMS = ("RS256", "ES256")


@dataclass
class TokenVerifier:
    jwks_file: Path | None = None
    token_file: Path | None = None
    audience: str | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._jwks_stamp: float | None = None
        self._keys: dict[str, Any] = {}
        self._tokens_stamp: float | None = None
        self._tokens: list[tuple[bytes, str]] = []

    def principal(self, token: str) -> str:
        """`User:<name>` for a token that verifies; AuthenticationError otherwise."""
        if self.token_file is not None:
            name = self._static(token)
            if name is not None:
                return f"User:{name}"
        if self.jwks_file is not None:
            return f"User:{self._jwt(token)}"
        raise AuthenticationError("the bearer token is not known")

    def _static(self, token: str) -> str | None:
        assert self.token_file is not None
        with self._lock:
            stamp = os.stat(self.token_file).st_mtime_ns
            if stamp != self._tokens_stamp:
                entries: list[tuple[bytes, str]] = []
                for text in self.token_file.read_text().splitlines():
                    text = text.strip()
                    if text and not text.startswith("#"):
                        secret, _, name = text.partition(" ")
                        if name.strip():
                            entries.append((secret.encode(), name.strip()))
                self._tokens, self._tokens_stamp = entries, stamp
            tokens = self._tokens
        given = token.encode()
        for known, holder in tokens:  # compared in constant time, all of them
            if hmac.compare_digest(known, given):
                return holder
        return None

    def _jwt(self, token: str) -> str:
        assert self.jwks_file is not None
        with self._lock:
            stamp = os.stat(self.jwks_file).st_mtime_ns
            if stamp != self._jwks_stamp:
                document = json.loads(self.jwks_file.read_text())
                loaded: dict[str, Any] = {}
                for jwk in document.get("keys", []):
                    loaded[jwk.get("kid", "")] = jwt.PyJWK.from_dict(jwk).key
                self._keys, self._jwks_stamp = loaded, stamp
            keys = self._keys
        try:
            header = jwt.get_unverified_header(token)
            signing_key = keys.get(header.get("kid", ""))
            if signing_key is None:
                raise AuthenticationError("the bearer token's key (kid) is not in the key set")
            claims = jwt.decode(
                token,
                key=signing_key,
                algorithms=list(ALGORITHMS),
                audience=self.audience,
                options={"require": ["exp", "sub"], "verify_aud": self.audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationError("the bearer token has expired") from None
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"the bearer token does not verify: {exc}") from None
        return str(claims["sub"])
