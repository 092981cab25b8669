"""InitProducerId 0–4 over the core's ProducerIds (cluster/producer_ids.py: idempotent
producers, a new producer id at epoch 0 each time; a transactional id is refused, seglog has
no transactions). Needs IdempotentWrite on the cluster, as Kafka's broker checks."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from seglog.errors import SeglogError

from .api_table import ApiTable
from .error_codes import INVALID_REQUEST, NONE, kafka_error_code
from .kafka_call import KafkaCall


def init_producer_id(call: KafkaCall, request: Any) -> Any:
    response_class = InitProducerIdResponse[call.version]
    if request.transactional_id == "":
        # Kafka's transaction coordinator: an idempotent producer sends null; an empty id is
        # an invalid request (not an idempotent producer id, which `or ""` would give it).
        return response_class(
            throttle_time_ms=0, error_code=INVALID_REQUEST, producer_id=-1, producer_epoch=-1
        )
    try:
        given = call.core.producer_ids.init_producer_id(call.caller, request.transactional_id)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=kafka_error_code(exc, "cluster"),
            producer_id=-1,
            producer_epoch=-1,
        )
    return response_class(
        throttle_time_ms=0,
        error_code=NONE,
        producer_id=given.producer_id,
        producer_epoch=given.epoch,
    )


def register(table: ApiTable) -> None:
    table.register(InitProducerIdRequest, 0, 4, init_producer_id)
