"""DescribeTransactions 0 and ListTransactions 0–2 (KIP-664, `kafka-transactions describe`
and `list`) over the transaction coordinator's queries (transactions/queries.py).

A transactional id coordinated by another gateway answers NOT_COORDINATOR (the admin client
finds its coordinator and asks it); ListTransactions lists what this gateway coordinates,
and the admin client asks every broker. ListTransactions v2's TransactionalIdPattern is a
Java regular expression matched whole; Python's `re` reads the common subset the same, and a
pattern longer than 1000 characters or that does not compile is INVALID_REQUEST (bounded
before it is run).
"""

from __future__ import annotations

import re
import time
from typing import Any

from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

from seglog.errors import SeglogError

from .api_table import ApiTable
from .error_codes import INVALID_REQUEST, NONE, kafka_error_code
from .kafka_call import KafkaCall

MAX_PATTERN_CHARS = 1000
MAX_DESCRIBED = 10_000  # ids in one DescribeTransactions: more is not a real admin client's


def describe_transactions(call: KafkaCall, request: Any) -> Any:
    response_class = DescribeTransactionsResponse[call.version]
    state_class = response_class.TransactionState
    topic_class = state_class.TopicData
    states = []
    for tid in request.transactional_ids[:MAX_DESCRIBED]:
        try:
            found = call.core.transactions.queries.describe(call.caller, tid)
        except SeglogError as exc:
            states.append(
                state_class(
                    error_code=kafka_error_code(exc, "transactional_id"),
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=[],
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in found.partitions:
            by_topic.setdefault(topic, []).append(partition)
        states.append(
            state_class(
                error_code=NONE,
                transactional_id=tid,
                transaction_state=found.state,
                transaction_timeout_ms=found.timeout_ms,
                transaction_start_time_ms=found.start_ms,
                producer_id=found.producer_id,
                producer_epoch=found.producer_epoch,
                topics=[topic_class(topic=t, partitions=ps) for t, ps in by_topic.items()],
            )
        )
    return response_class(throttle_time_ms=0, transaction_states=states)


def list_transactions(call: KafkaCall, request: Any) -> Any:
    response_class = ListTransactionsResponse[call.version]
    pattern_text = request.transactional_id_pattern if call.version >= 2 else None
    pattern = None
    if pattern_text:
        try:
            if len(pattern_text) > MAX_PATTERN_CHARS:
                raise re.error("too long")
            pattern = re.compile(pattern_text)
        except re.error:
            return response_class(
                throttle_time_ms=0,
                error_code=INVALID_REQUEST,
                unknown_state_filters=[],
                transaction_states=[],
            )
    listed, unknown = call.core.transactions.queries.list(
        call.caller,
        list(request.state_filters),
        list(request.producer_id_filters),
        request.duration_filter if call.version >= 1 else -1,
        time.time_ns() // 1_000_000,
    )
    state_class = response_class.TransactionState
    return response_class(
        throttle_time_ms=0,
        error_code=NONE,
        unknown_state_filters=unknown,
        transaction_states=[
            state_class(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=t.state,
            )
            for t in listed
            if pattern is None or pattern.fullmatch(t.transactional_id)
        ],
    )


def register(table: ApiTable) -> None:
    table.register(DescribeTransactionsRequest, 0, 0, describe_transactions)
    table.register(ListTransactionsRequest, 0, 2, list_transactions)
