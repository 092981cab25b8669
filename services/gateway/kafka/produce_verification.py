"""A transactional produce's checks before it is forwarded (produce_apis.py), as Kafka's
broker makes them:

- any partition whose first batch has the transactional bit makes the request transactional
  (Kafka's RequestUtils.hasTransactionalRecords); it needs a transactional id the caller may
  Write, else the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
- KIP-890's verification, per transactional partition: the transaction coordinator must have
  the partition in the batch's producer's ongoing transaction at the batch's epoch. Kafka's
  answers when it does not: INVALID_PRODUCER_EPOCH for a fenced (older) epoch,
  INVALID_TXN_STATE for a partition not in the transaction (both fatal or abortable for the
  Java producer and librdkafka), and NOT_ENOUGH_REPLICAS, which clients retry, while the
  coordinator cannot answer (loading, completing the previous transaction, moving).

A transactional id coordinated by another gateway is verified by asking that gateway
(transactions/remote_verification.py: one bounded call per coordinator and producer, a
partition verified remembered briefly); a call that fails verifies nothing, answered
NOT_ENOUGH_REPLICAS for the client to retry, as when the local coordinator cannot answer.
"""

from __future__ import annotations

import logging
from typing import Any

from seglog.coordinator_errors import (
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from seglog.errors import (
    InvalidProducerEpochError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    PermissionDeniedError,
    SeglogError,
)
from seglog.records.batch import ATTRIBUTES_OFFSET, HEADER, TRANSACTIONAL_MASK, read_header

from ..routing.data_plane import TopicProduce
from .kafka_call import KafkaCall

logger = logging.getLogger(__name__)


class TransactionalIdRefusedError(PermissionDeniedError):
    """A transactional produce without a transactional id the caller may Write: answered
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""


def _transactional_batch(records: Any) -> bool:
    # attributes is an int16: the transactional bit is in its low byte.
    return bool(
        records
        and len(records) >= HEADER.size
        and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK
    )


def _produce_error(exc: SeglogError) -> SeglogError:
    """The error Kafka's broker answers a produce for the coordinator's `exc`."""
    if isinstance(exc, ProducerFencedError):
        return InvalidProducerEpochError(str(exc))
    if isinstance(exc, InvalidProducerIdMappingError):
        return InvalidTxnStateError(str(exc))
    if exc.retriable:
        return NotEnoughReplicasError(f"the transaction coordinator cannot verify yet: {exc}")
    return exc


def verify_transactional(
    call: KafkaCall, request: Any, topics: list[TopicProduce]
) -> dict[tuple[str, int], SeglogError]:
    """The partitions refused by verification, with their errors (none refused: {}).
    Raises TransactionalIdRefusedError when the request may not be written at all."""
    transactional = [
        (t.topic, p.partition, bytes(p.batches[0][: HEADER.size]))
        for t in topics
        for p in t.partitions
        if p.batches and _transactional_batch(p.batches[0])
    ]
    if not transactional:
        return {}
    tid = request.transactional_id
    core = call.core
    if tid is None or not core.authorization.allows(call.caller, "Write", "transactional_id", tid):
        raise TransactionalIdRefusedError(
            f"{call.caller.principal} may not Write transactional id {tid!r} (Produce)"
        )
    coordinator = core.transactions.coordinator
    refused: dict[tuple[str, int], SeglogError] = {}
    # (coordinator address, producer id, epoch) -> the partitions to ask it about
    elsewhere: dict[tuple[str, int, int], list[tuple[str, int]]] = {}
    for topic, partition, header_bytes in transactional:
        header = read_header(header_bytes, 0)
        try:
            coordinator.verify(
                call.caller, tid, header.producer_id, header.producer_epoch, (topic, partition)
            )
        except NotCoordinatorError as exc:
            key = (str(exc.coordinator), header.producer_id, header.producer_epoch)
            elsewhere.setdefault(key, []).append((topic, partition))
        except SeglogError as exc:
            refused[(topic, partition)] = _produce_error(exc)
    verifier = core.transactions.remote_verifier
    for (address, producer_id, epoch), partitions in elsewhere.items():
        answers = verifier.verify(address, tid, producer_id, epoch, partitions)
        for tp, error in answers.items():
            if error is not None:
                logger.debug("%s-%d: %s refused %r: %s", tp[0], tp[1], address, tid, error)
                refused[tp] = _produce_error(error)
    return refused
