"""Produce 3–9 over the broker core's data plane (routing/data_plane.py: the gRPC path's
routing, checks and semantics, ACLs checked on the caller): the record batches go on as the
producer's bytes, never decoded here.

Every topic's leaders are written at once by the core; a topic refused as a whole (not
authorized, unknown, internal) answers that error on each of its partitions, the other topics
are written, as Kafka's broker answers per partition. acks=0 answers nothing. Transactions are
not supported: a transactional produce is refused whole.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.errors import InvalidRequestError

from ..routing.data_plane import PartitionRecords, ProducedPartition, TopicProduce
from . import produce_coalescing as coalescing
from .api_table import ApiTable
from .data_call_end import call_scope
from .error_codes import NONE
from .error_table import DataApi, data_error_code
from .kafka_call import KafkaCall

NO_OFFSET = -1

Results = dict[tuple[str, int], ProducedPartition]


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


def register(table: ApiTable) -> None:
    table.register(ProduceRequest, 3, 9, produce, batch_handler=produce_many)
