"""A transactional producer's calls on the transaction coordinator (transactions/
coordinator.py): AddPartitionsToTxn 0–5, AddOffsetsToTxn 0–4, EndTxn 0–5.

seglog finalizes no transaction.version (broker/features.py): Kafka's clients then take the
transactions-v1 path (the Java client sends AddPartitionsToTxn ≤ 3, EndTxn ≤ 4, Produce ≤ 11
and adds partitions explicitly; librdkafka reads no features). EndTxn v5 is answered as v4
with the producer's id and epoch unchanged (there is no TV2 epoch bump to report).
AddPartitionsToTxn v4+ is the brokers' batched form (ClusterAction on the cluster): each
transaction's partitions are added, or with verify_only checked (KIP-890).

Errors as Kafka's broker answers them: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below the
versions that know it (KIP-588: AddPartitionsToTxn and AddOffsetsToTxn and EndTxn < 2);
when one partition of AddPartitionsToTxn is refused, the others answer
OPERATION_NOT_ATTEMPTED and none is added.
"""

from __future__ import annotations

from typing import Any

from kafka import errors as kafka_errors
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
)

from seglog.coordinator_errors import ProducerFencedError
from seglog.errors import PermissionDeniedError, SeglogError

from ..authorization import CLUSTER
from ..transactions.completion_waits import CompletionPendingError
from .api_table import ApiTable
from .error_codes import NONE, Resource, kafka_error_code
from .kafka_call import KafkaCall
from .later import answer_later

OPERATION_NOT_ATTEMPTED: int = kafka_errors.OperationNotAttemptedError.errno
INVALID_PRODUCER_EPOCH: int = kafka_errors.InvalidProducerEpochError.errno
FIRST_PRODUCER_FENCED_VERSION = 2  # KIP-588
FIRST_BATCHED_VERSION = 4  # KIP-890: the brokers' form


def txn_error_code(error: SeglogError, version: int, first_fenced_version: int) -> int:
    """Kafka's code for a coordinator error at this version of the API."""
    if isinstance(error, ProducerFencedError) and version < first_fenced_version:
        return INVALID_PRODUCER_EPOCH
    resource: Resource = "transactional_id"
    if isinstance(error, PermissionDeniedError) and " group " in str(error):
        resource = "group"
    return kafka_error_code(error, resource)


# -- AddPartitionsToTxn ------------------------------------------------------------------------


def _topic_results(response_class: Any, codes: dict[tuple[str, int], int]) -> list[Any]:
    result_class = response_class.AddPartitionsToTxnTopicResult
    partition_class = result_class.AddPartitionsToTxnPartitionResult
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(
            partition_class(partition_index=partition, partition_error_code=code)
        )
    return [result_class(name=t, results_by_partition=ps) for t, ps in by_topic.items()]


def _add_one(
    call: KafkaCall,
    tid: str,
    producer_id: int,
    epoch: int,
    topics: Any,
    verify_only: bool,
    park: bool = False,
) -> dict[tuple[str, int], int]:
    """Each partition's code for one transaction's partitions (`park`: CompletionPendingError
    raised while the id's previous transaction completes)."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    transactions = call.core.transactions
    version = call.version
    if verify_only:
        codes = {}
        for tp in wanted:
            try:
                transactions.coordinator.verify(call.caller, tid, producer_id, epoch, tp)
                codes[tp] = NONE
            except SeglogError as exc:
                codes[tp] = txn_error_code(exc, version, FIRST_PRODUCER_FENCED_VERSION)
        return codes
    try:
        errors = transactions.coordinator.add_partitions(
            call.caller, tid, producer_id, epoch, wanted, park=park
        )
    except CompletionPendingError:
        raise
    except SeglogError as exc:
        code = txn_error_code(exc, version, FIRST_PRODUCER_FENCED_VERSION)
        return {tp: code for tp in wanted}
    refused = any(error is not None for error in errors.values())
    return {
        tp: (
            kafka_error_code(error, "topic")
            if error is not None
            else (OPERATION_NOT_ATTEMPTED if refused else NONE)
        )
        for tp, error in errors.items()
    }


def add_partitions_to_txn(call: KafkaCall, request: Any) -> Any:
    version = call.version
    response_class = AddPartitionsToTxnResponse[version]
    if version < FIRST_BATCHED_VERSION:

        def respond(park: bool) -> Any:
            codes = _add_one(
                call,
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                request.v3_and_below_topics,
                verify_only=False,
                park=park,
            )
            return response_class(
                throttle_time_ms=0,
                results_by_topic_v3_and_below=_topic_results(response_class, codes),
            )

        # A producer's next transaction while its last one's markers are being written: the
        # call is taken up again once they are (transactions/completion_waits.py).
        try:
            return respond(park=True)
        except CompletionPendingError as pending:
            return answer_later(pending.completed, lambda _: respond(park=False))
    try:
        call.core.authorization.check(
            call.caller, [("ClusterAction", *CLUSTER)], "AddPartitionsToTxn"
        )
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=kafka_error_code(exc, "cluster"),
            results_by_transaction=[],
        )
    results = []
    for txn in request.transactions:
        codes = _add_one(
            call,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            verify_only=bool(txn.verify_only),
        )
        results.append(
            response_class.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(response_class, codes),
            )
        )
    return response_class(throttle_time_ms=0, error_code=NONE, results_by_transaction=results)


# -- AddOffsetsToTxn, EndTxn -------------------------------------------------------------------


def add_offsets_to_txn(call: KafkaCall, request: Any) -> Any:
    def respond(park: bool) -> Any:
        try:
            call.core.transactions.coordinator.add_offsets(
                call.caller,
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.group_id,
                park=park,
            )
            code = NONE
        except CompletionPendingError:
            raise
        except SeglogError as exc:
            code = txn_error_code(exc, call.version, FIRST_PRODUCER_FENCED_VERSION)
        return AddOffsetsToTxnResponse[call.version](throttle_time_ms=0, error_code=code)

    try:
        return respond(park=True)
    except CompletionPendingError as pending:  # as AddPartitionsToTxn's
        return answer_later(pending.completed, lambda _: respond(park=False))


def end_txn(call: KafkaCall, request: Any) -> Any:
    try:
        call.core.transactions.coordinator.end_txn(
            call.caller,
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            bool(request.committed),
        )
        code = NONE
    except SeglogError as exc:
        code = txn_error_code(exc, call.version, FIRST_PRODUCER_FENCED_VERSION)
    response = EndTxnResponse[call.version](throttle_time_ms=0, error_code=code)
    if call.version >= 5:
        ok = code == NONE
        response.producer_id = request.producer_id if ok else -1
        response.producer_epoch = request.producer_epoch if ok else -1
    return response


def register(table: ApiTable) -> None:
    table.register(AddPartitionsToTxnRequest, 0, 5, add_partitions_to_txn)
    table.register(AddOffsetsToTxnRequest, 0, 4, add_offsets_to_txn)
    table.register(EndTxnRequest, 0, 5, end_txn)
