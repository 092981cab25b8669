"""A user's SCRAM credential as the registry keeps it (KIP-554): the salt, the iteration count,
StoredKey and ServerKey of RFC 5802 — enough to verify a client's proof and to prove the server
to it, never the password nor the salted password.

A client altering a credential (AlterUserScramCredentials) sends the salted password,
Hi(password, salt, iterations), computed on its side; the registry derives the two keys from
it (RFC 5802 section 3) and drops it:

    ClientKey = HMAC(SaltedPassword, "Client Key");  StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")

Iterations are bounded as Kafka's controller bounds them (ScramControlManager): at least
4096 (RFC 7677's minimum, Kafka's ScramMechanism.minIterations) and at most 16384 (its
MAX_ITERATIONS): a client proving itself costs that many HMACs on its side only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

# Kafka's ScramMechanism: its name and the type byte the admin APIs carry (0 is UNKNOWN).
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISM_TYPES: dict[str, int] = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISM_NAMES: dict[int, str] = {t: name for name, t in MECHANISM_TYPES.items()}
_HASHES: dict[str, Callable[[], Any]] = {
    SCRAM_SHA_256: hashlib.sha256,
    SCRAM_SHA_512: hashlib.sha512,
}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, Any]:
        encode = base64.b64encode
        return {
            "salt": encode(self.salt).decode(),
            "stored_key": encode(self.stored_key).decode(),
            "server_key": encode(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScramCredential:
        decode = base64.b64decode
        return cls(
            decode(data["salt"]),
            decode(data["stored_key"]),
            decode(data["server_key"]),
            int(data["iterations"]),
        )


def digest_size(mechanism: str) -> int:
    return int(_HASHES[mechanism]().digest_size)


def credential_of(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The credential a salted password stands for (the keys of RFC 5802 section 3)."""
    digest = _HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    stored_key = hashlib.new(digest().name, client_key).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC (what a client computes)."""
    name = mechanism.removeprefix("SCRAM-").replace("-", "").lower()
    return hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
