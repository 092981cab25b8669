"""KIP-890's verification of a produce's transactional partitions, however the produce came: the
Kafka port's (kafka/produce_verification.py) and seglog's gRPC Produce (routing/
relayed_calls.py, through `GrpcProduceVerification`), as Kafka's broker makes it:

- any partition whose first batch has the transactional bit makes the request transactional
  (Kafka's RequestUtils.hasTransactionalRecords); it needs a transactional id the caller may
  Write, else the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED (PERMISSION_DENIED
  on the gRPC API);
- per transactional partition, the transaction coordinator must have the partition in the
  batch's producer's ongoing transaction at the batch's epoch. Kafka's answers when it does
  not: INVALID_PRODUCER_EPOCH for a fenced (older) epoch, INVALID_TXN_STATE for a partition
  not in the transaction, and NOT_ENOUGH_REPLICAS, which clients retry, while the coordinator
  cannot answer (loading, completing the previous transaction, moving).

A transactional id coordinated by another gateway is verified by asking that gateway
(remote_verification.py: one bounded call per coordinator and producer, a partition verified
remembered briefly); a call that fails verifies nothing, answered NOT_ENOUGH_REPLICAS for the
client to retry, as when the local coordinator cannot answer.

A produce with no transactional batch costs one header byte read per partition here and no
call: nothing is asked of any coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

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
from seglog.rpc import wire

from ..authorization import Authorization
from ..broker.caller import Caller
from .log_formats import TopicPartition

if TYPE_CHECKING:
    from .transactions_core import TransactionsCore

logger = logging.getLogger(__name__)


class TransactionalIdRefusedError(PermissionDeniedError):
    """A transactional produce without a transactional id the caller may Write: answered
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""


class TransactionalBatch(NamedTuple):
    """A partition whose first batch is transactional, with that batch's header bytes."""

    topic: str
    partition: int
    header: bytes


def is_transactional(records: bytes | memoryview | None) -> bool:
    # attributes is an int16: the transactional bit is in its low byte.
    return bool(
        records
        and len(records) >= HEADER.size
        and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK
    )


def transactional_batches(
    topic: str, partitions: Iterable[tuple[int, bytes | memoryview | None]]
) -> list[TransactionalBatch]:
    """The (partition, records) entries whose first batch is transactional."""
    return [
        TransactionalBatch(topic, partition, bytes(records[: HEADER.size]))
        for partition, records in partitions
        if records is not None and is_transactional(records)
    ]


def produce_error(exc: SeglogError) -> SeglogError:
    """The error Kafka's broker answers a produce for the coordinator's `exc`."""
    if isinstance(exc, ProducerFencedError):
        return InvalidProducerEpochError(str(exc))
    if isinstance(exc, InvalidProducerIdMappingError):
        return InvalidTxnStateError(str(exc))
    if exc.retriable:
        return NotEnoughReplicasError(f"the transaction coordinator cannot verify yet: {exc}")
    return exc


def refused_partitions(
    transactions: TransactionsCore,
    authorization: Authorization,
    caller: Caller,
    transactional_id: str | None,
    batches: list[TransactionalBatch],
    api: str = "Produce",
) -> dict[TopicPartition, SeglogError]:
    """The partitions of `batches` refused by verification, with their errors ({}: none).
    Raises TransactionalIdRefusedError when the request may not be written at all."""
    if not batches:
        return {}
    tid = transactional_id
    if tid is None or not authorization.allows(caller, "Write", "transactional_id", tid):
        raise TransactionalIdRefusedError(
            f"{caller.principal} may not Write transactional id {tid!r} ({api})"
        )
    coordinator = transactions.coordinator
    refused: dict[TopicPartition, SeglogError] = {}
    # (coordinator address, producer id, epoch) -> the partitions to ask it about
    elsewhere: dict[tuple[str, int, int], list[TopicPartition]] = {}
    for topic, partition, header_bytes in batches:
        header = read_header(header_bytes, 0)
        try:
            coordinator.verify(
                caller, tid, header.producer_id, header.producer_epoch, (topic, partition)
            )
        except NotCoordinatorError as exc:
            key = (str(exc.coordinator), header.producer_id, header.producer_epoch)
            elsewhere.setdefault(key, []).append((topic, partition))
        except SeglogError as exc:
            refused[(topic, partition)] = produce_error(exc)
    verifier = transactions.remote_verifier
    for (address, producer_id, epoch), partitions in elsewhere.items():
        answers = verifier.verify(address, tid, producer_id, epoch, partitions)
        for tp, error in answers.items():
            if error is not None:
                logger.debug("%s-%d: %s refused %r: %s", tp[0], tp[1], address, tid, error)
                refused[tp] = produce_error(error)
    return refused


class GrpcProduceVerification:
    """The gRPC Produce's verification: a request with a partition refused is refused whole,
    nothing forwarded (the gRPC API's contract for a request it cannot take), with that
    partition's error."""

    def __init__(self, transactions: TransactionsCore, authorization: Authorization) -> None:
        self.transactions = transactions
        self.authorization = authorization

    def check(self, caller: Caller, request: wire.ScannedProduce) -> None:
        batches = transactional_batches(
            request.topic, ((p.partition, p.records) for p in request.partitions)
        )
        if not batches:
            return
        refused = refused_partitions(
            self.transactions, self.authorization, caller, request.transactional_id, batches
        )
        if refused:
            _, error = min(refused.items(), key=lambda item: item[0])
            raise error
