"""Users' SCRAM credentials, as Kafka's DescribeUserScramCredentials and
AlterUserScramCredentials have them (KIP-554), in the broker core: typed requests from any
adapter, the caller authorized here (Describe on the cluster to read, Alter on the cluster to
change: Kafka's ACLs for these APIs), the credentials kept in the registry (scram_credential
records: file and etcd stores alike).

Per-user outcomes follow Kafka's controller (ScramControlManager) and metadata image
(ScramImage): each user's result stands alone, a user named twice in one request is
DUPLICATE_RESOURCE, an unknown user RESOURCE_NOT_FOUND; an alteration that fails for one
user changes nothing for it and does not stop the others. What the caller may not do fails
the whole request (PermissionDeniedError).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .scram_credentials import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_of,
    digest_size,
)

if TYPE_CHECKING:
    from ..authorization import Authorization
    from ..broker.caller import Caller
    from .registry import Registry

# Kafka's error names for a user's outcome (the adapter maps them to its codes).
UserError = Literal[
    "RESOURCE_NOT_FOUND",
    "DUPLICATE_RESOURCE",
    "UNACCEPTABLE_CREDENTIAL",
    "UNSUPPORTED_SASL_MECHANISM",
]
CLUSTER = ("cluster", "kafka-cluster")
MIN_SALT_BYTES = 12
MAX_SALT_BYTES = 1024  # sent back in every server-first message: no reason for more


@dataclass(frozen=True)
class CredentialInfo:
    mechanism: str  # SCRAM-SHA-256 / SCRAM-SHA-512
    iterations: int


@dataclass(frozen=True)
class UserOutcome:
    user: str
    error: UserError | None = None
    message: str | None = None
    credentials: tuple[CredentialInfo, ...] = ()


@dataclass(frozen=True)
class ScramDeletion:
    user: str
    mechanism: str  # a name not in MECHANISM_TYPES is UNSUPPORTED_SASL_MECHANISM


@dataclass(frozen=True)
class ScramUpsertion:
    user: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes  # Hi(password, salt, iterations), computed by the client


class UserScram:
    def __init__(self, registry: Registry, authorization: Authorization) -> None:
        self.registry = registry
        self.authorization = authorization

    def describe(self, caller: Caller, users: list[str] | None) -> list[UserOutcome]:
        """Every user with a credential when `users` is None or empty, else those named."""
        self.authorization.check(caller, [("Describe", *CLUSTER)], "DescribeUserScramCredentials")
        credentials = self.registry.scram_credentials  # one image: read once
        named = users or sorted(credentials)
        outcomes = []
        for user in dict.fromkeys(named):
            if named.count(user) > 1:
                outcomes.append(
                    UserOutcome(
                        user,
                        "DUPLICATE_RESOURCE",
                        "Cannot describe SCRAM credentials for the same user twice in a "
                        f"single request: {user}",
                    )
                )
            elif user not in credentials:
                outcomes.append(
                    UserOutcome(
                        user,
                        "RESOURCE_NOT_FOUND",
                        f"Attempt to describe a user credential that does not exist: {user}",
                    )
                )
            else:
                infos = tuple(
                    CredentialInfo(mechanism, credential.iterations)
                    for mechanism, credential in sorted(credentials[user].items())
                )
                outcomes.append(UserOutcome(user, credentials=infos))
        return outcomes

    def alter(
        self,
        caller: Caller,
        deletions: list[ScramDeletion],
        upsertions: list[ScramUpsertion],
    ) -> list[UserOutcome]:
        """Each user's deletion or upsertion checked, then every valid one written in one
        registry batch; an outcome per user named."""
        self.authorization.check(caller, [("Alter", *CLUSTER)], "AlterUserScramCredentials")
        existing = self.registry.scram_credentials
        errors: dict[str, tuple[UserError, str]] = {}
        changes: dict[str, tuple[str, ScramCredential | None]] = {}
        named: list[ScramDeletion | ScramUpsertion] = [*deletions, *upsertions]
        for change in named:
            user = change.user
            if user in errors:
                continue
            if changes.pop(user, None) is not None:
                errors[user] = (
                    "DUPLICATE_RESOURCE",
                    "A user credential cannot be altered twice in the same request",
                )
                continue
            error = _checked(change, existing)
            if error is not None:
                errors[user] = error
            elif isinstance(change, ScramDeletion):
                changes[user] = (change.mechanism, None)
            else:
                changes[user] = (
                    change.mechanism,
                    credential_of(
                        change.mechanism, change.salt, change.salted_password, change.iterations
                    ),
                )
        self.registry.alter_scram_credentials(
            [(user, mechanism, credential) for user, (mechanism, credential) in changes.items()]
        )
        outcomes = [UserOutcome(user) for user in changes]
        outcomes += [UserOutcome(user, code, message) for user, (code, message) in errors.items()]
        return outcomes


def _checked(
    change: ScramDeletion | ScramUpsertion,
    existing: dict[str, dict[str, ScramCredential]],
) -> tuple[UserError, str] | None:
    if not change.user:
        return "UNACCEPTABLE_CREDENTIAL", "Username must not be empty"
    if change.mechanism not in MECHANISM_TYPES:
        return "UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism"
    if isinstance(change, ScramDeletion):
        if change.mechanism not in existing.get(change.user, {}):
            return "RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist"
        return None
    if change.iterations < MIN_ITERATIONS:
        return "UNACCEPTABLE_CREDENTIAL", "Too few iterations"
    if change.iterations > MAX_ITERATIONS:
        return "UNACCEPTABLE_CREDENTIAL", "Too many iterations"
    # Kafka takes any bytes here, but a credential no client could ever prove is refused
    # now rather than stored: a salted password that is not one digest long was not made by
    # Hi() of this mechanism, and the exchange (scramp) wants a salt of at least 12 bytes
    # (Kafka's tools send 16-26).
    if not MIN_SALT_BYTES <= len(change.salt) <= MAX_SALT_BYTES:
        return (
            "UNACCEPTABLE_CREDENTIAL",
            f"The salt must be {MIN_SALT_BYTES} to {MAX_SALT_BYTES} bytes long",
        )
    if len(change.salted_password) != digest_size(change.mechanism):
        return "UNACCEPTABLE_CREDENTIAL", "The salted password is not one digest long"
    return None
