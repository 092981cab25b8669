"""Kafka's AlterClientQuotas and DescribeClientQuotas on the gRPC API: an adapter over the
core's `ClientQuotaAdmin` (client_quotas.py), which checks the caller and the request."""

from __future__ import annotations

import grpc

from seglog.errors import InvalidRequestError, SeglogError
from seglog.rpc.status import abort
from seglog.v1 import gateway_pb2

from ..authorization import Authorization
from .client_quotas import ClientQuotaAdmin, EntityPart, QuotaAlteration, QuotaOp


def _parts(components: list[gateway_pb2.QuotaEntity]) -> tuple[EntityPart, ...]:
    for c in components:
        if c.is_default and c.name:
            raise InvalidRequestError(f"a default {c.entity_type} has no name")
    return tuple(EntityPart(c.entity_type, None if c.is_default else c.name) for c in components)


class QuotaService:
    def __init__(self, quotas: ClientQuotaAdmin, authorization: Authorization) -> None:
        self.quotas = quotas
        self.authorization = authorization

    def AlterClientQuotas(
        self, request: gateway_pb2.AlterClientQuotasRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.AlterClientQuotasResponse:
        try:
            alterations = [
                QuotaAlteration(
                    _parts(list(entry.entity)),
                    tuple(QuotaOp(op.key, op.value, op.remove) for op in entry.ops),
                )
                for entry in request.entries
            ]
            caller = self.authorization.caller_of(context)
            self.quotas.alter(caller, alterations, validate_only=request.validate_only)
        except SeglogError as exc:
            abort(context, exc)
        return gateway_pb2.AlterClientQuotasResponse()

    def DescribeClientQuotas(
        self, request: gateway_pb2.DescribeClientQuotasRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeClientQuotasResponse:
        try:
            caller = self.authorization.caller_of(context)
            entries = self.quotas.describe(caller, _parts(list(request.components)))
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.DescribeClientQuotasResponse()
        for found in entries:
            entry = response.entries.add(values=found.values)
            for part in found.entity:
                entry.entity.add(
                    entity_type=part.entity_type,
                    name=part.name or "",
                    is_default=part.name is None,
                )
        return response
