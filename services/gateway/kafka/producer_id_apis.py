"""InitProducerId 0–5: without a transactional id, over the core's ProducerIds
(cluster/producer_ids.py: a new producer id at epoch 0 each time; IdempotentWrite on the
cluster, as Kafka's broker checks); with one, over the transaction coordinator
(transactions/coordinator.py: Write on the transactional id, the id's producer id with its
epoch bumped, an ongoing transaction of the old epoch aborted). v3+ carries the producer's
current id and epoch (KIP-360); PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v4 (KIP-588).
v6 (KIP-939, two-phase commit) is not served."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from seglog.errors import SeglogError

from .api_table import ApiTable
from .error_codes import INVALID_REQUEST, NONE, kafka_error_code
from .kafka_call import KafkaCall
from .txn_apis import txn_error_code

FIRST_PRODUCER_FENCED_VERSION = 4  # KIP-588
FIRST_RECOVERY_VERSION = 3  # KIP-360: the producer's current id and epoch


def init_producer_id(call: KafkaCall, request: Any) -> Any:
    response_class = InitProducerIdResponse[call.version]
    if request.transactional_id == "":
        # Kafka's transaction coordinator: an idempotent producer sends null; an empty id is
        # an invalid request (not an idempotent producer id, which `or ""` would give it).
        return response_class(
            throttle_time_ms=0, error_code=INVALID_REQUEST, producer_id=-1, producer_epoch=-1
        )
    try:
        if request.transactional_id is None:
            given = call.core.producer_ids.init_producer_id(call.caller, None)
            producer_id, epoch = given.producer_id, given.epoch
        else:
            recovering = call.version >= FIRST_RECOVERY_VERSION
            grant = call.core.transactions.coordinator.init_producer_id(
                call.caller,
                request.transactional_id,
                request.transaction_timeout_ms,
                request.producer_id if recovering else -1,
                request.producer_epoch if recovering else -1,
            )
            producer_id, epoch = grant.producer_id, grant.producer_epoch
    except SeglogError as exc:
        code = (
            kafka_error_code(exc, "cluster")
            if request.transactional_id is None
            else txn_error_code(exc, call.version, FIRST_PRODUCER_FENCED_VERSION)
        )
        return response_class(
            throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1
        )
    return response_class(
        throttle_time_ms=0, error_code=NONE, producer_id=producer_id, producer_epoch=epoch
    )


def register(table: ApiTable) -> None:
    table.register(InitProducerIdRequest, 0, 5, init_producer_id)
