"""Kafka's DescribeClientQuotas and AlterClientQuotas (KIP-546) on the listener, over the
core's ClientQuotaAdmin (cluster/client_quotas.py), which authorizes: DescribeConfigs on the
cluster to describe, AlterConfigs on it to alter. Entity names are Kafka's: a null
name is the entity type's default. Each alteration entry is checked and applied on its own
and answers its own error, as Kafka's broker does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from seglog.errors import InvalidRequestError, SeglogError

from ..cluster.client_quotas import ENTITY_TYPES, EntityPart, QuotaAlteration, QuotaOp
from .error_codes import kafka_error_code

if TYPE_CHECKING:
    from .api_table import ApiTable
    from .kafka_call import KafkaCall

# DescribeClientQuotas' component match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def register(table: ApiTable) -> None:
    table.register(DescribeClientQuotasRequest, 0, 1, describe_client_quotas)
    table.register(AlterClientQuotasRequest, 0, 1, alter_client_quotas)


def _matches(entity: dict[str, str | None], components: Any, strict: bool) -> bool:
    for component in components:
        if component.entity_type not in entity:
            return False
        name = entity[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
        if component.match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or set(entity) <= {c.entity_type for c in components}


def _check_components(components: Any) -> None:
    for component in components:
        if component.entity_type not in ENTITY_TYPES:
            raise InvalidRequestError(f"unknown quota entity type {component.entity_type!r}")
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise InvalidRequestError(f"unknown match type {component.match_type}")


def describe_client_quotas(call: KafkaCall, request: Any) -> Any:
    response_class = DescribeClientQuotasResponse[call.version]
    entry_class = response_class.EntryData
    try:
        _check_components(request.components)
        found_entries = call.core.quotas.describe(call.caller)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=kafka_error_code(exc, "cluster"),
            error_message=str(exc),
            entries=None,
        )
    entries = []
    for found in found_entries:
        entity = {part.entity_type: part.name for part in found.entity}
        if not _matches(entity, request.components, request.strict):
            continue
        entries.append(
            entry_class(
                entity=[
                    entry_class.EntityData(entity_type=kind, entity_name=name)
                    for kind, name in entity.items()
                ],
                values=[
                    entry_class.ValueData(key=key, value=value)
                    for key, value in sorted(found.values.items())
                ],
            )
        )
    return response_class(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)


def alter_client_quotas(call: KafkaCall, request: Any) -> Any:
    response_class = AlterClientQuotasResponse[call.version]
    entry_class = response_class.EntryData
    results = []
    for entry in request.entries:
        alteration = QuotaAlteration(
            tuple(EntityPart(e.entity_type, e.entity_name) for e in entry.entity),
            tuple(QuotaOp(op.key, op.value, op.remove) for op in entry.ops),
        )
        error_code, message = 0, None
        try:
            call.core.quotas.alter(call.caller, [alteration], validate_only=request.validate_only)
        except SeglogError as exc:
            error_code, message = kafka_error_code(exc, "cluster"), str(exc)
        results.append(
            entry_class(
                error_code=error_code,
                error_message=message,
                entity=[
                    entry_class.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ],
            )
        )
    return response_class(throttle_time_ms=0, entries=results)
