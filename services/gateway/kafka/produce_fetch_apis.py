"""Produce 3–9 and Fetch 4–12 over the broker core's data plane (routing/data_plane.py: the
gRPC path's routing, checks and semantics, ACLs checked on the caller): the record batches go
on as the producer's bytes and come back as the stored bytes, never decoded here.

Produce: every topic's leaders written at once by the core; a topic refused as a whole
(not authorized, unknown, internal) answers that error on each of its partitions, the other
topics are written, as Kafka's broker answers per partition. acks=0 answers nothing.
Transactions are not supported: a transactional produce is refused whole.

Fetch: one core fetch for the whole request (it splits by leader node and long-polls with
max_wait_ms/min_bytes on the nodes). The stored batches are relayed unchanged, the batch
holding a mid-batch fetch offset included whole (clients skip its earlier records). Fetch
sessions (v7+) are not kept: every answer has session_id 0, which clients take as
"sessionless" and go on sending full requests; an incremental request (a session id this
listener never gave) answers FETCH_SESSION_ID_NOT_FOUND. With no transactions, the last
stable offset is the high watermark and there are no aborted transactions.
"""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.errors import InvalidRequestError, SeglogError

from ..routing.call_scope import CallEnd
from ..routing.data_plane import (
    FetchPosition,
    FetchQuery,
    PartitionRecords,
    ProducedPartition,
    TopicProduce,
)
from . import produce_coalescing as coalescing
from .api_table import ApiTable
from .error_codes import FETCH_SESSION_ID_NOT_FOUND, NONE
from .error_table import DataApi, data_error_code
from .fetch_budget import FetchBudget
from .kafka_call import KafkaCall

NO_OFFSET = -1
SESSIONLESS = 0
# Kafka's broker fetch.max.bytes (55 MiB): a client's max_bytes is capped to it, so what one
# connection's fetch holds is bounded whatever the client asks.
FETCH_MAX_BYTES = 55 * 1024 * 1024

Results = dict[tuple[str, int], ProducedPartition]


def call_scope(call: KafkaCall) -> CallEnd:
    """The call's end as the core's data path sees it; a client over its quota is throttled
    the Kafka way (KIP-219): the answer goes at once, saying throttle_time_ms, and the
    connection is muted that long after it."""
    session = call.session

    def defer_throttle(throttle_ms: int) -> bool:
        until = time.monotonic() + throttle_ms / 1000
        session.muted_until = max(session.muted_until, until)
        return True

    return CallEnd(defer_throttle)


# -- Produce ---------------------------------------------------------------------------------


def _produce(call: KafkaCall, request: Any, topics: list[TopicProduce]) -> Results:
    """Each partition's result of the core's produce of `topics`."""
    if request.transactional_id is not None:
        refused = InvalidRequestError("transactions are not supported: no transactional.id")
        return {
            (t.topic, p.partition): ProducedPartition(p.partition, refused)
            for t in topics
            for p in t.partitions
        }
    scope = call_scope(call)
    try:
        answers = call.core.data_plane.produce(call.caller, topics, scope)
    finally:
        scope.finish()
    return {
        (topic.topic, result.partition): result
        for topic, results in zip(topics, answers, strict=True)
        for result in results
    }


def _topics_of(request: Any) -> list[TopicProduce]:
    return [
        TopicProduce(
            topic.name,
            request.acks,
            request.timeout_ms,
            [PartitionRecords(data.index, (data.records or b"",)) for data in topic.partition_data],
        )
        for topic in request.topic_data
    ]


def _response(call: KafkaCall, request: Any, results: Results) -> Any:
    """The ProduceResponse of `request` from the core's per-partition results."""
    response_class = ProduceResponse[call.version]
    topic_class = response_class.TopicProduceResponse
    partition_class = topic_class.PartitionProduceResponse
    topics = []
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            result = results[(topic.name, data.index)]
            failed = result.error is not None
            partitions.append(
                partition_class(
                    index=data.index,
                    error_code=(
                        NONE
                        if result.error is None
                        else data_error_code(DataApi.PRODUCE, result.error)
                    ),
                    base_offset=NO_OFFSET if failed else result.base_offset,
                    log_append_time_ms=NO_OFFSET if failed else result.log_append_time_ms,
                    log_start_offset=NO_OFFSET if failed else result.log_start_offset,
                    record_errors=[],
                    error_message=None if result.error is None else str(result.error),
                )
            )
        topics.append(topic_class(name=topic.name, partition_responses=partitions))
    return response_class(responses=topics, throttle_time_ms=call.throttle_time_ms)


def produce(call: KafkaCall, request: Any) -> Any:
    call.attributes["kafka.topics"] = ",".join(t.name for t in request.topic_data[:16])
    if not request.topic_data:
        results: Results = {}  # Kafka's broker answers an empty topic array with an empty answer
    else:
        results = _produce(call, request, _topics_of(request))
    if request.acks == 0:
        return None
    return _response(call, request, results)


def produce_many(calls: list[KafkaCall], requests: list[Any]) -> list[Any]:
    """Queued produce requests of one connection, consecutive mergeable ones as one append
    per partition (produce_coalescing.py); each request's response, in order."""
    responses: list[Any] = [None] * len(requests)
    for run in coalescing.runs(requests):
        if len(run) == 1:
            responses[run[0]] = produce(calls[run[0]], requests[run[0]])
            continue
        members = [requests[i] for i in run]
        call = calls[run[0]]
        topics = coalescing.merged_topics(members)
        call.attributes["kafka.topics"] = ",".join(t.topic for t in topics[:16])
        call.attributes["kafka.coalesced_requests"] = str(len(run))
        merged = _produce(call, members[0], topics)
        for i, results in zip(run, coalescing.split_results(members, merged), strict=True):
            responses[i] = _response(calls[i], requests[i], results)
    return responses


# -- Fetch -----------------------------------------------------------------------------------


def _query(request: Any) -> FetchQuery:
    return FetchQuery(
        [
            FetchPosition(
                topic.topic,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
            )
            for topic in request.topics
            for p in topic.partitions
        ],
        max_bytes=max(1, min(request.max_bytes, FETCH_MAX_BYTES)),
        min_bytes=request.min_bytes,
        max_wait_ms=request.max_wait_ms,
    )


class _PartitionAnswer:
    __slots__ = ("error", "high_watermark", "log_start_offset", "max_bytes", "records", "cut")

    def __init__(self, max_bytes: int = 0) -> None:
        self.error = NONE
        self.high_watermark = NO_OFFSET
        self.log_start_offset = NO_OFFSET
        self.max_bytes = max_bytes  # the request's partition_max_bytes
        self.records: list[memoryview] = []
        self.cut = False  # a batch was left out for the budget: nothing later may follow


def _gather(call: KafkaCall, query: FetchQuery) -> dict[tuple[str, int], _PartitionAnswer]:
    """Each partition's answer from the core's fetch (a partition's batches may come in
    several pieces, each of whole batches, in offset order).

    The fetch spans leader nodes, each long-polling on its own: as soon as the pieces come
    to `min_bytes` the fetch is ended (the other nodes' polls cancelled), as Kafka's broker
    answers once the request as a whole has min_bytes, and the partitions not answered yet
    are asked again without waiting, so every partition is in the answer. What the answer
    holds stays within max_bytes and each partition_max_bytes (fetch_budget.py)."""
    answers = {
        (p.topic, p.partition): _PartitionAnswer(p.partition_max_bytes) for p in query.positions
    }
    answered: set[tuple[str, int]] = set()
    budget = FetchBudget(query.max_bytes)
    _read(call, query, answers, answered, budget)
    unanswered = [p for p in query.positions if (p.topic, p.partition) not in answered]
    if unanswered and len(unanswered) < len(query.positions):
        rest = FetchQuery(unanswered, max_bytes=max(1, budget.remaining))
        _read(call, rest, answers, answered, budget)
    return answers


def _read(
    call: KafkaCall,
    query: FetchQuery,
    answers: dict[tuple[str, int], _PartitionAnswer],
    answered: set[tuple[str, int]],
    budget: FetchBudget,
) -> None:
    """Reads the core's fetch into `answers` until it ends, or until it holds min_bytes of
    records (when the fetch may wait); a fetch refused whole answers its error on every
    partition not answered yet."""
    received_bytes = 0
    enough = max(query.min_bytes, 1)
    scope = call_scope(call)
    try:
        pieces = call.core.data_plane.fetch(call.caller, query, scope)
        for piece in pieces:
            key = (piece.topic, piece.partition)
            answer = answers.get(key)
            if answer is None:
                continue
            answered.add(key)
            if piece.error is not None:
                answer.error = data_error_code(DataApi.FETCH, piece.error)
            answer.high_watermark = piece.high_watermark
            answer.log_start_offset = piece.log_start_offset
            if piece.records and not answer.cut:
                kept, whole = budget.take(key, answer.max_bytes, piece.records)
                if len(kept):
                    answer.records.append(kept)
                    received_bytes += len(kept)
                answer.cut = not whole
            if query.max_wait_ms > 0 and received_bytes >= enough:
                break
    except SeglogError as exc:
        code = data_error_code(DataApi.FETCH, exc)
        for key, answer in answers.items():
            if key not in answered:
                answer.error = code
    finally:
        # The call's end first, as gRPC runs its callbacks when a client cancels: they
        # cancel the nodes' calls, which closing the fetch waits for.
        scope.finish()
        pieces.close()


def fetch(call: KafkaCall, request: Any) -> Any:
    response_class = FetchResponse[call.version]
    topic_class = response_class.FetchableTopicResponse
    partition_class = topic_class.PartitionData
    if call.version >= 7 and request.session_id != SESSIONLESS:
        return response_class(
            throttle_time_ms=0,
            error_code=FETCH_SESSION_ID_NOT_FOUND,
            session_id=SESSIONLESS,
            responses=[],
        )
    call.attributes["kafka.topics"] = ",".join(dict.fromkeys(t.topic for t in request.topics[:16]))
    query = _query(request)
    answers = _gather(call, query) if query.positions else {}
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            answer = answers[(topic.topic, p.partition)]
            partitions.append(
                partition_class(
                    partition_index=p.partition,
                    error_code=answer.error,
                    high_watermark=answer.high_watermark,
                    last_stable_offset=answer.high_watermark,
                    log_start_offset=answer.log_start_offset,
                    aborted_transactions=[],
                    preferred_read_replica=-1,
                    records=b"".join(answer.records) if answer.error == NONE else b"",
                )
            )
        topics.append(topic_class(topic=topic.topic, partitions=partitions))
    return response_class(
        throttle_time_ms=call.throttle_time_ms,
        error_code=NONE,
        session_id=SESSIONLESS,
        responses=topics,
    )


def register(table: ApiTable) -> None:
    table.register(ProduceRequest, 3, 9, produce, batch_handler=produce_many)
    table.register(FetchRequest, 4, 12, fetch)
