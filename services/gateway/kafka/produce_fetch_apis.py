"""Produce 3–9 and Fetch 4–12, relayed through the gateway's own Produce and Fetch (the gRPC
path's routing, checks, ACLs and semantics): the record batches go on as the producer's
bytes and come back as the stored bytes, never decoded here.

Produce: one gateway Produce per topic (seglog's ProduceRequest names one topic), the topics
concurrently; a topic refused as a whole (not authorized, unknown, internal) answers that
error on each of its partitions, the other topics are written, as Kafka's broker answers per
partition. acks=0 answers nothing. Transactions are not supported: a transactional produce
is refused whole.

Fetch: one gateway Fetch for the whole request (it splits by leader node and long-polls with
max_wait_ms/min_bytes on the nodes). The stored batches are relayed unchanged, the batch
holding a mid-batch fetch offset included whole (clients skip its earlier records). Fetch
sessions (v7+) are not kept: every answer has session_id 0, which clients take as
"sessionless" and go on sending full requests; an incremental request (a session id this
listener never gave) answers FETCH_SESSION_ID_NOT_FOUND. With no transactions, the last
stable offset is the high watermark and there are no aborted transactions.
"""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.errors import InvalidRequestError, SeglogError
from seglog.rpc import wire
from seglog.v1 import common_pb2

from . import produce_coalescing as coalescing
from .api_table import ApiTable
from .error_codes import FETCH_SESSION_ID_NOT_FOUND, NONE, TOPIC_AUTHORIZATION_FAILED
from .error_table import DataApi, data_error_code
from .fetch_budget import FetchBudget
from .kafka_call import KafkaCall

if TYPE_CHECKING:
    from ..server import Gateway

NO_OFFSET = -1
NO_LEADER_EPOCH = -1  # a Kafka producer names none: the gateway routes by its current leader
SESSIONLESS = 0
# Topics of one produce request sent to the gateway at once (threads of this request).
MAX_CONCURRENT_TOPICS = 8
# Kafka's broker fetch.max.bytes (55 MiB): a client's max_bytes is capped to it, so what one
# connection's fetch holds is bounded whatever the client asks.
FETCH_MAX_BYTES = 55 * 1024 * 1024


# -- Produce ---------------------------------------------------------------------------------


def _produce_topic(call: KafkaCall, request: Any, topic: Any) -> common_pb2.ProduceResponse:
    """The gateway's answer for one topic's partitions; a whole-topic refusal as an answer
    with the error on each partition."""
    try:
        if request.transactional_id is not None:
            raise InvalidRequestError("transactions are not supported: no transactional.id")
        # Written as wire bytes: the records are copied once, not into a message and then
        # out of it again (the gateway's Produce reads wire bytes anyway).
        raw_request = wire.encode_produce_request(
            topic.name,
            request.acks,
            request.timeout_ms,
            (
                (data.index, NO_LEADER_EPOCH, (data.records or b"",))
                for data in topic.partition_data
            ),
        )
        raw = call.invoke("Produce", call.gateway.service.Produce, raw_request)
        answer: common_pb2.ProduceResponse = common_pb2.ProduceResponse.FromString(raw)
        return answer
    except SeglogError as exc:
        refused = common_pb2.ProduceResponse(topic=topic.name)
        for data in topic.partition_data:
            result = refused.partitions.add(
                partition=data.index, base_offset=NO_OFFSET, last_offset=NO_OFFSET
            )
            result.error = common_pb2.ErrorCode.Value(exc.reason)
            result.error_message = str(exc)
        return refused


def _produce_topics(call: KafkaCall, request: Any) -> list[common_pb2.ProduceResponse]:
    """Each topic's answer, in request order. Several topics go to the gateway concurrently
    (seglog's Produce names one topic), so an acks=all request for n topics waits about as
    long as one, not n times as long; each in the request's trace context."""
    topics = request.topic_data
    if not topics:
        return []  # Kafka's broker answers an empty topic array with an empty answer
    if len(topics) == 1:
        return [_produce_topic(call, request, topics[0])]
    context = contextvars.copy_context()
    with ThreadPoolExecutor(
        max_workers=min(len(topics), MAX_CONCURRENT_TOPICS), thread_name_prefix="kafka-produce"
    ) as pool:
        futures = [
            pool.submit(context.copy().run, _produce_topic, call, request, topic)
            for topic in topics
        ]
        return [future.result() for future in futures]


def _response(call: KafkaCall, request: Any, results: dict[tuple[str, int], Any]) -> Any:
    """The ProduceResponse of `request` from the gateway's per-partition results."""
    response_class = ProduceResponse[call.version]
    topic_class = response_class.TopicProduceResponse
    partition_class = topic_class.PartitionProduceResponse
    topics = []
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            result = results[(topic.name, data.index)]
            failed = result.error != common_pb2.NONE
            partitions.append(
                partition_class(
                    index=data.index,
                    error_code=data_error_code(
                        DataApi.PRODUCE, common_pb2.ErrorCode.Name(result.error)
                    ),
                    base_offset=NO_OFFSET if failed else result.base_offset,
                    log_append_time_ms=NO_OFFSET if failed else result.log_append_time_ms,
                    log_start_offset=NO_OFFSET if failed else result.log_start_offset,
                    record_errors=[],
                    error_message=result.error_message or None,
                )
            )
        topics.append(topic_class(name=topic.name, partition_responses=partitions))
    return response_class(responses=topics, throttle_time_ms=call.throttle_time_ms)


def _by_partition(answers: list[common_pb2.ProduceResponse]) -> dict[tuple[str, int], Any]:
    return {(a.topic, r.partition): r for a in answers for r in a.partitions}


def produce(call: KafkaCall, request: Any) -> Any:
    call.attributes["kafka.topics"] = ",".join(t.name for t in request.topic_data[:16])
    results = _by_partition(_produce_topics(call, request))
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
        merged = coalescing.merged_request(members)
        call.attributes["kafka.topics"] = ",".join(t.name for t in merged.topic_data[:16])
        call.attributes["kafka.coalesced_requests"] = str(len(run))
        answers = _produce_topics(call, merged)
        for i, results in zip(run, coalescing.split_results(members, answers), strict=True):
            responses[i] = _response(calls[i], requests[i], results)
    return responses


# -- Fetch -----------------------------------------------------------------------------------


def _fetch_request(request: Any, readable: set[str]) -> common_pb2.FetchRequest:
    proto = common_pb2.FetchRequest(
        min_bytes=request.min_bytes,
        max_wait_ms=request.max_wait_ms,
        max_bytes=max(1, min(request.max_bytes, FETCH_MAX_BYTES)),
    )
    for topic in request.topics:
        if topic.topic not in readable:
            continue
        for p in topic.partitions:
            part = proto.partitions.add(
                topic=topic.topic,
                partition=p.partition,
                fetch_offset=p.fetch_offset,
                partition_max_bytes=p.partition_max_bytes,
            )
            if p.current_leader_epoch >= 0:
                part.current_leader_epoch = p.current_leader_epoch
    return proto


class _PartitionAnswer:
    __slots__ = ("error", "high_watermark", "log_start_offset", "max_bytes", "records", "cut")

    def __init__(self, max_bytes: int = 0) -> None:
        self.error = NONE
        self.high_watermark = NO_OFFSET
        self.log_start_offset = NO_OFFSET
        self.max_bytes = max_bytes  # the request's partition_max_bytes
        self.records: list[memoryview] = []
        self.cut = False  # a batch was left out for the budget: nothing later may follow


def _gather(call: KafkaCall, proto: common_pb2.FetchRequest) -> dict[tuple[str, int], Any]:
    """Each partition's answer from the gateway's fetch stream (a partition's batches may
    come in several messages, each of whole batches, in offset order); a fetch refused whole
    answers its error on every partition.

    The gateway's fetch spans leader nodes, each long-polling on its own: as soon as the
    messages come to `min_bytes` the stream is closed (the other nodes' polls cancelled), as
    Kafka's broker answers once the request as a whole has min_bytes, and the partitions not
    answered yet are asked again without waiting, so every partition is in the answer. What
    the answer holds stays within max_bytes and each partition_max_bytes (fetch_budget.py)."""
    answers: dict[tuple[str, int], _PartitionAnswer] = {
        (p.topic, p.partition): _PartitionAnswer(p.partition_max_bytes) for p in proto.partitions
    }
    answered: set[tuple[str, int]] = set()
    budget = FetchBudget(proto.max_bytes)
    try:
        _read_stream(call, proto, answers, answered, budget)
        unanswered = [p for p in proto.partitions if (p.topic, p.partition) not in answered]
        if unanswered and len(unanswered) < len(proto.partitions):
            rest = common_pb2.FetchRequest(max_bytes=max(1, budget.remaining))
            rest.partitions.extend(unanswered)
            _read_stream(call, rest, answers, answered, budget)
    except SeglogError as exc:
        code = data_error_code(DataApi.FETCH, exc)
        for key, answer in answers.items():
            if key not in answered:
                answer.error = code
    return answers


def _read_stream(
    call: KafkaCall,
    proto: common_pb2.FetchRequest,
    answers: dict[tuple[str, int], _PartitionAnswer],
    answered: set[tuple[str, int]],
    budget: FetchBudget,
) -> None:
    """Reads the gateway's fetch stream into `answers` until it ends, or until it holds
    min_bytes of records (when the fetch may wait)."""
    received_bytes = 0
    enough = max(proto.min_bytes, 1)
    stream = call.invoke_stream("Fetch", call.gateway.service.Fetch, proto.SerializeToString())
    try:
        for message in stream:
            fetched = common_pb2.FetchResponse.FromString(message)
            key = (fetched.topic, fetched.partition)
            answer = answers.get(key)
            if answer is None:
                continue
            answered.add(key)
            if fetched.error != common_pb2.NONE:
                reason = common_pb2.ErrorCode.Name(fetched.error)
                answer.error = data_error_code(DataApi.FETCH, reason)
            answer.high_watermark = fetched.high_watermark
            answer.log_start_offset = fetched.log_start_offset
            if fetched.records and not answer.cut:
                kept, whole = budget.take(key, answer.max_bytes, fetched.records)
                if len(kept):
                    answer.records.append(kept)
                    received_bytes += len(kept)
                answer.cut = not whole
            if proto.max_wait_ms > 0 and received_bytes >= enough:
                break
    finally:
        stream.close()


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
    # Kafka's broker refuses a topic it may not Read on that topic's partitions alone; the
    # gateway's Fetch refuses the whole call, so such topics are answered here and left out.
    names = {t.topic for t in request.topics}
    readable = {name for name in names if call.allowed("Read", "topic", name)}
    proto = _fetch_request(request, readable)
    answers = _gather(call, proto) if proto.partitions else {}
    denied = _PartitionAnswer()
    denied.error = TOPIC_AUTHORIZATION_FAILED
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            answer = answers[(topic.topic, p.partition)] if topic.topic in readable else denied
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


def register(table: ApiTable, gateway: Gateway) -> None:
    table.register(ProduceRequest, 3, 9, produce, batch_handler=produce_many)
    table.register(FetchRequest, 4, 12, fetch)
