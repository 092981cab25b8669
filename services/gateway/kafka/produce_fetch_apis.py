"""Produce 3–9 and Fetch 4–12, relayed through the gateway's own Produce and Fetch (the gRPC
path's routing, checks, ACLs and semantics): the record batches go on as the producer's
bytes and come back as the stored bytes, never decoded here.

Produce: one gateway Produce per topic (seglog's ProduceRequest names one topic); a topic
refused as a whole (not authorized, unknown, internal) answers that error on each of its
partitions, the other topics are written, as Kafka's broker answers per partition. acks=0
answers nothing. Transactions are not supported: a transactional produce is refused whole.

Fetch: one gateway Fetch for the whole request (it splits by leader node and long-polls with
max_wait_ms/min_bytes on the nodes). The stored batches are relayed unchanged, the batch
holding a mid-batch fetch offset included whole (clients skip its earlier records). Fetch
sessions (v7+) are not kept: every answer has session_id 0, which clients take as
"sessionless" and go on sending full requests; an incremental request (a session id this
listener never gave) answers FETCH_SESSION_ID_NOT_FOUND. With no transactions, the last
stable offset is the high watermark and there are no aborted transactions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.errors import InvalidRequestError, SeglogError
from seglog.v1 import common_pb2

from .api_table import ApiTable
from .error_codes import (
    FETCH_SESSION_ID_NOT_FOUND,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    kafka_error_code,
)
from .kafka_call import KafkaCall

if TYPE_CHECKING:
    from ..server import Gateway

NO_OFFSET = -1
SESSIONLESS = 0


# -- Produce ---------------------------------------------------------------------------------


def _produce_topic(call: KafkaCall, request: Any, topic: Any) -> common_pb2.ProduceResponse:
    """The gateway's answer for one topic's partitions; a whole-topic refusal as an answer
    with the error on each partition."""
    proto = common_pb2.ProduceRequest(
        topic=topic.name, acks=request.acks, timeout_ms=request.timeout_ms
    )
    for data in topic.partition_data:
        proto.partitions.add(partition=data.index, records=data.records or b"")
    try:
        if request.transactional_id is not None:
            raise InvalidRequestError("transactions are not supported: no transactional.id")
        raw = call.invoke("Produce", call.gateway.service.Produce, proto.SerializeToString())
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


def produce(call: KafkaCall, request: Any) -> Any:
    response_class = ProduceResponse[call.version]
    topic_class = response_class.TopicProduceResponse
    partition_class = topic_class.PartitionProduceResponse
    call.attributes["kafka.topics"] = ",".join(t.name for t in request.topic_data[:16])
    topics = []
    for topic in request.topic_data:
        answer = _produce_topic(call, request, topic)
        partitions = []
        for result in answer.partitions:
            reason = common_pb2.ErrorCode.Name(result.error)
            failed = result.error != common_pb2.NONE
            partitions.append(
                partition_class(
                    index=result.partition,
                    error_code=kafka_error_code(reason),
                    base_offset=NO_OFFSET if failed else result.base_offset,
                    log_append_time_ms=result.log_append_time_ms if not failed else NO_OFFSET,
                    log_start_offset=result.log_start_offset if not failed else NO_OFFSET,
                    record_errors=[],
                    error_message=result.error_message or None,
                )
            )
        topics.append(topic_class(name=topic.name, partition_responses=partitions))
    if request.acks == 0:
        return None
    return response_class(responses=topics, throttle_time_ms=0)


# -- Fetch -----------------------------------------------------------------------------------


def _fetch_request(request: Any, readable: set[str]) -> common_pb2.FetchRequest:
    proto = common_pb2.FetchRequest(
        min_bytes=request.min_bytes, max_wait_ms=request.max_wait_ms, max_bytes=request.max_bytes
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
    __slots__ = ("error", "high_watermark", "log_start_offset", "records")

    def __init__(self) -> None:
        self.error = NONE
        self.high_watermark = NO_OFFSET
        self.log_start_offset = NO_OFFSET
        self.records: list[bytes] = []


def _gather(call: KafkaCall, proto: common_pb2.FetchRequest) -> dict[tuple[str, int], Any]:
    """Each partition's answer from the gateway's fetch stream (a partition's batches may
    come in several messages, in offset order); a fetch refused whole answers its error on
    every partition."""
    answers: dict[tuple[str, int], _PartitionAnswer] = {
        (p.topic, p.partition): _PartitionAnswer() for p in proto.partitions
    }
    try:
        messages = call.invoke("Fetch", call.gateway.service.Fetch, proto.SerializeToString())
    except SeglogError as exc:
        code = kafka_error_code(exc)
        for answer in answers.values():
            answer.error = code
        return answers
    for message in messages:
        fetched = common_pb2.FetchResponse.FromString(message)
        found = answers.get((fetched.topic, fetched.partition))
        if found is None:
            continue
        answer = found
        if fetched.error != common_pb2.NONE:
            answer.error = kafka_error_code(common_pb2.ErrorCode.Name(fetched.error))
        answer.high_watermark = fetched.high_watermark
        answer.log_start_offset = fetched.log_start_offset
        if fetched.records:
            answer.records.append(fetched.records)
    return answers


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
        throttle_time_ms=0, error_code=NONE, session_id=SESSIONLESS, responses=topics
    )


def register(table: ApiTable, gateway: Gateway) -> None:
    table.register(ProduceRequest, 3, 9, produce)
    table.register(FetchRequest, 4, 12, fetch)
