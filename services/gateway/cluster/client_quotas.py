"""Kafka's client quotas as the broker core keeps them (KIP-546): byte rates per user
principal and/or client id, kept durably in the registry (client_quota records) and enforced
by the data plane (routing/quotas.py). Typed: the gRPC QuotaService and the Kafka
listener's quota APIs are adapters over `ClientQuotaAdmin`.

Who may call: Kafka's rule, checked here for every caller alike: AlterConfigs on the cluster
to alter, DescribeConfigs on it to describe. An alteration is checked whole before anything
changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from seglog.errors import InvalidRequestError

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from .registry import Registry

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)
USER, CLIENT_ID = "user", "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
DEFAULT_NAME = "<default>"

EntityKey = tuple[tuple[str, str], ...]  # sorted (entity type, name) pairs


@dataclass(frozen=True)
class EntityPart:
    """One component of a quota entity: its type and name, None for the type's default."""

    entity_type: str
    name: str | None


@dataclass(frozen=True)
class QuotaOp:
    key: str
    value: float = 0.0
    remove: bool = False


@dataclass(frozen=True)
class QuotaAlteration:
    entity: tuple[EntityPart, ...]
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True)
class QuotaEntry:
    entity: tuple[EntityPart, ...]
    values: Mapping[str, float]


def key_of(parts: Iterable[EntityPart]) -> EntityKey:
    """An entity's key from its components; InvalidRequestError if malformed."""
    named: dict[str, str] = {}
    for part in parts:
        kind = part.entity_type
        if kind not in ENTITY_TYPES:
            raise InvalidRequestError(
                f"unknown quota entity type {kind!r} (expected one of {', '.join(ENTITY_TYPES)})"
            )
        if kind in named:
            raise InvalidRequestError(f"quota entity type {kind!r} given twice")
        if part.name is None:
            named[kind] = DEFAULT_NAME
        elif not part.name or part.name == DEFAULT_NAME:
            raise InvalidRequestError(f"a {kind} quota entity needs a name (or is the default)")
        else:
            named[kind] = part.name
    if not named:
        raise InvalidRequestError("a quota entity needs a user and/or a client id")
    return tuple(sorted(named.items()))


def _checked_value(op: QuotaOp) -> float | None:
    if op.key not in QUOTA_KEYS:
        raise InvalidRequestError(
            f"unknown quota key {op.key!r} (expected one of {', '.join(QUOTA_KEYS)})"
        )
    if op.remove:
        return None
    if not math.isfinite(op.value) or op.value <= 0:
        raise InvalidRequestError(f"{op.key} must be a rate above 0 bytes/s, not {op.value}")
    return float(op.value)


class ClientQuotaAdmin:
    def __init__(self, registry: Registry, authorization: Authorization) -> None:
        self.registry = registry
        self.authorization = authorization

    def alter(
        self, caller: Caller, alterations: Iterable[QuotaAlteration], *, validate_only: bool
    ) -> None:
        """Every alteration checked, then all applied in one registry change (none when
        `validate_only`); InvalidRequestError for the first malformed one."""
        self.authorization.check(caller, [("AlterConfigs", *CLUSTER)], "AlterClientQuotas")
        changes: dict[EntityKey, dict[str, float | None]] = {}
        for alteration in alterations:
            change = changes.setdefault(key_of(alteration.entity), {})
            for op in alteration.ops:
                change[op.key] = _checked_value(op)
        if not validate_only:
            self.registry.alter_client_quotas(changes)

    def describe(self, caller: Caller, entity: Iterable[EntityPart] = ()) -> list[QuotaEntry]:
        """Every entity's quotas, by entity; only `entity`'s when one is given."""
        self.authorization.check(caller, [("DescribeConfigs", *CLUSTER)], "DescribeClientQuotas")
        parts = list(entity)
        wanted = key_of(parts) if parts else None
        return [
            QuotaEntry(
                tuple(
                    EntityPart(kind, None if name == DEFAULT_NAME else name) for kind, name in key
                ),
                dict(values),
            )
            for key, values in sorted(self.registry.client_quotas.items())
            if wanted is None or key == wanted
        ]
