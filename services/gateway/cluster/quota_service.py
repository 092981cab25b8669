"""Kafka's AlterClientQuotas and DescribeClientQuotas on the gateway: quotas kept durably in
the registry (client_quota records), enforced by the relay (routing/quotas.py). The whole
request is checked before anything changes. Who may call these is the authorizer's to say
(AlterConfigs / DescribeConfigs on the cluster, as Kafka's)."""

from __future__ import annotations

import math

import grpc

from seglog.errors import InvalidRequestError, SeglogError
from seglog.rpc.status import abort
from seglog.v1 import gateway_pb2

from ..routing.quotas import DEFAULT_NAME, ENTITY_TYPES, QUOTA_KEYS, EntityKey
from .registry import Registry


class QuotaService:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def AlterClientQuotas(
        self, request: gateway_pb2.AlterClientQuotasRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.AlterClientQuotasResponse:
        try:
            changes: dict[EntityKey, dict[str, float | None]] = {}
            for entry in request.entries:
                change = changes.setdefault(entity_of(entry.entity), {})
                for op in entry.ops:
                    change[op.key] = _checked_value(op)
            if not request.validate_only:
                self.registry.alter_client_quotas(changes)
        except SeglogError as exc:
            abort(context, exc)
        return gateway_pb2.AlterClientQuotasResponse()

    def DescribeClientQuotas(
        self, request: gateway_pb2.DescribeClientQuotasRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeClientQuotasResponse:
        try:
            wanted = entity_of(request.components) if request.components else None
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.DescribeClientQuotasResponse()
        for entity, values in sorted(self.registry.client_quotas.items()):
            if wanted is not None and entity != wanted:
                continue
            entry = response.entries.add(values=values)
            for kind, name in entity:
                is_default = name == DEFAULT_NAME
                entry.entity.add(
                    entity_type=kind, name="" if is_default else name, is_default=is_default
                )
        return response


def entity_of(components) -> EntityKey:  # type: ignore[no-untyped-def]
    """An entity's key from its QuotaEntity components; InvalidRequestError if malformed."""
    parts: dict[str, str] = {}
    for component in components:
        kind = component.entity_type
        if kind not in ENTITY_TYPES:
            raise InvalidRequestError(
                f"unknown quota entity type {kind!r} (expected one of {', '.join(ENTITY_TYPES)})"
            )
        if kind in parts:
            raise InvalidRequestError(f"quota entity type {kind!r} given twice")
        if component.is_default:
            if component.name:
                raise InvalidRequestError(f"a default {kind} has no name")
            parts[kind] = DEFAULT_NAME
        elif not component.name or component.name == DEFAULT_NAME:
            raise InvalidRequestError(f"a {kind} quota entity needs a name (or is_default)")
        else:
            parts[kind] = component.name
    if not parts:
        raise InvalidRequestError("a quota entity needs a user and/or a client id")
    return tuple(sorted(parts.items()))


def _checked_value(op: gateway_pb2.QuotaValue) -> float | None:
    if op.key not in QUOTA_KEYS:
        raise InvalidRequestError(
            f"unknown quota key {op.key!r} (expected one of {', '.join(QUOTA_KEYS)})"
        )
    if op.remove:
        return None
    if not math.isfinite(op.value) or op.value <= 0:
        raise InvalidRequestError(f"{op.key} must be a rate above 0 bytes/s, not {op.value}")
    return float(op.value)
