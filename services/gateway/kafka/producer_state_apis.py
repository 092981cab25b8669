"""DescribeProducers 0 (KIP-664): `kafka-transactions describe-producers`, over the broker
core's ProducerStates (routing/producer_states.py), which asks the leaders' nodes.

Errors per partition, as the Java Admin's DescribeProducersHandler reads them: a leader that
is down, moving or not reachable is NOT_LEADER_OR_FOLLOWER (the client looks the leader up
again and retries), never LEADER_NOT_AVAILABLE, which it would fail on; a topic the caller may
not Read is TOPIC_AUTHORIZATION_FAILED; an unknown one UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse

from seglog.errors import SeglogError

from ..routing.producer_states import PartitionProducers, ProducerStates
from .error_codes import NONE, kafka_error_code

if TYPE_CHECKING:
    from ..server import Gateway
    from .api_table import ApiTable
    from .kafka_call import KafkaCall

# Not this partition's leader now, for whatever reason: Kafka's retriable answer.
_RETRY_ELSEWHERE = {
    "NODE_UNAVAILABLE",
    "LEADER_NOT_AVAILABLE",
    "LOG_CLOSED",
    "REQUEST_TIMED_OUT",
    "KAFKA_STORAGE_ERROR",
}


def register(table: ApiTable, gateway: Gateway) -> None:
    core = ProducerStates(gateway.registry, gateway.connections, gateway.authorization)

    def describe_producers(call: KafkaCall, request: Any) -> Any:
        return _describe(core, call, request)

    table.register(DescribeProducersRequest, 0, 0, describe_producers)


def _code(error: SeglogError) -> int:
    if error.reason in _RETRY_ELSEWHERE:
        return kafka_error_code("NOT_LEADER_OR_FOLLOWER")
    return kafka_error_code(error, "topic")


def _describe(core: ProducerStates, call: KafkaCall, request: Any) -> Any:
    response_class = DescribeProducersResponse[call.version]
    topic_class = response_class.TopicResponse
    partition_class = topic_class.PartitionResponse
    state_class = partition_class.ProducerState
    wanted: dict[str, list[int]] = {}
    for topic in request.topics:
        wanted.setdefault(topic.name, []).extend(topic.partition_indexes)
    answers = core.describe(call.caller, wanted)

    def partition(index: int, answer: PartitionProducers) -> Any:
        if answer.error is not None:
            return partition_class(
                partition_index=index,
                error_code=_code(answer.error),
                error_message=str(answer.error),
                active_producers=[],
            )
        return partition_class(
            partition_index=index,
            error_code=NONE,
            error_message=None,
            active_producers=[
                state_class(
                    producer_id=p.producer_id,
                    producer_epoch=p.epoch,
                    last_sequence=p.last_sequence,
                    last_timestamp=p.last_timestamp_ms,
                    coordinator_epoch=p.coordinator_epoch,
                    current_txn_start_offset=p.current_txn_start_offset,
                )
                for p in answer.producers
            ],
        )

    topics = [
        topic_class(
            name=name,
            partitions=[
                partition(index, answers[(name, index)]) for index in dict.fromkeys(indexes)
            ],
        )
        for name, indexes in wanted.items()
    ]
    return response_class(throttle_time_ms=call.throttle_time_ms, topics=topics)
