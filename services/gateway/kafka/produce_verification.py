"""A transactional produce's checks before it is forwarded (produce_apis.py), as Kafka's
broker makes them: the transactional id the caller may Write, and KIP-890's verification of
each transactional partition with the transaction coordinator (transactions/
batch_verification.py, shared with the gRPC Produce). The Kafka port answers a refused
partition alone (Kafka's per-partition errors) and forwards the others."""

from __future__ import annotations

from typing import Any

from seglog.errors import SeglogError

from ..routing.data_plane import TopicProduce
from ..transactions.batch_verification import (
    TransactionalIdRefusedError,
    refused_partitions,
    transactional_batches,
)
from .kafka_call import KafkaCall

__all__ = ["TransactionalIdRefusedError", "verify_transactional"]


def verify_transactional(
    call: KafkaCall, request: Any, topics: list[TopicProduce]
) -> dict[tuple[str, int], SeglogError]:
    """The partitions refused by verification, with their errors (none refused: {}).
    Raises TransactionalIdRefusedError when the request may not be written at all."""
    batches = [
        batch
        for t in topics
        for batch in transactional_batches(
            t.topic,
            ((p.partition, p.batches[0] if p.batches else None) for p in t.partitions),
        )
    ]
    return refused_partitions(
        call.core.transactions,
        call.core.authorization,
        call.caller,
        request.transactional_id,
        batches,
    )
