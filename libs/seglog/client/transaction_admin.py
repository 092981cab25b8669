"""What the admin API answers about transactions (Kafka's TransactionDescription and
TransactionListing), from the gateways' TransactionCoordinator service: a description from
the transactional id's coordinator, a listing from the gateway asked (each gateway lists the
transactions it coordinates, as each Kafka broker does)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..v1 import transactions_pb2 as pb
from .structs import TopicPartition
from .transactions import TxnCoordinatorCalls


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, CompleteCommit, ...
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # -1: no transaction open
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


def describe_transaction(
    calls: TxnCoordinatorCalls, transactional_id: str, timeout_s: float
) -> TransactionDescription:
    answer = calls.call(
        transactional_id,
        pb.TXN_KEY_TRANSACTION,
        "DescribeTransactions",
        pb.TxnDescribeRequest(transactional_id=transactional_id),
        time.monotonic() + timeout_s,
    ).transaction
    return TransactionDescription(
        answer.transactional_id,
        answer.state,
        answer.producer_id,
        answer.producer_epoch,
        answer.timeout_ms,
        answer.start_ms,
        tuple(TopicPartition(t.topic, p) for t in answer.partitions for p in t.partitions),
    )


def list_transactions(
    calls: TxnCoordinatorCalls,
    states: Iterable[str],
    producer_ids: Iterable[int],
    timeout_s: float,
) -> list[TransactionListing]:
    """The transactions the bootstrap gateway coordinates (every one with a single gateway)."""
    request = pb.TxnListRequest(
        states=list(states), producer_ids=list(producer_ids), min_duration_ms=-1
    )
    answer = calls.bootstrap.ListTransactions(request, timeout=timeout_s)
    return [
        TransactionListing(t.transactional_id, t.producer_id, t.state) for t in answer.transactions
    ]
