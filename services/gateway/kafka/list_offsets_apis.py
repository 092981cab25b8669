"""ListOffsets 1–10 through the gateway's ListOffsets (asked of each partition's leader):
EARLIEST (-2), LATEST (-1: the high watermark), MAX_TIMESTAMP (-3, v7+: the offset of the
record with the largest timestamp), EARLIEST_LOCAL (-4, v8+: the log start, seglog keeping
every segment locally) and LATEST_TIERED (-5, v9+: offset -1, as Kafka answers for a log
without remote storage), and by time. v10's timeout_ms is for reads from remote storage,
which seglog has none of. A request refused whole (not authorized) answers its error on
every partition."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from seglog.errors import SeglogError
from seglog.v1 import common_pb2

from .api_table import ApiTable
from .error_codes import NONE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_SERVER_ERROR
from .error_table import DataApi, data_error_code
from .kafka_call import KafkaCall

if TYPE_CHECKING:
    from ..server import Gateway

NO_OFFSET = -1


def list_offsets(call: KafkaCall, request: Any) -> Any:
    response_class = ListOffsetsResponse[call.version]
    topic_class = response_class.ListOffsetsTopicResponse
    partition_class = topic_class.ListOffsetsPartitionResponse
    # A topic the principal may not Describe is refused alone, as Kafka's broker refuses it
    # (the gateway's ListOffsets refuses the whole call).
    names = {t.name for t in request.topics}
    described = {name for name in names if call.allowed("Describe", "topic", name)}
    proto = common_pb2.ListOffsetsRequest()
    for topic in request.topics:
        if topic.name not in described:
            continue
        for p in topic.partitions:
            part = proto.partitions.add(
                topic=topic.name, partition=p.partition_index, timestamp=p.timestamp
            )
            if p.current_leader_epoch >= 0:
                part.current_leader_epoch = p.current_leader_epoch
    call.attributes["kafka.topics"] = ",".join(dict.fromkeys(t.name for t in request.topics[:16]))
    results: dict[tuple[str, int], Any] = {}
    refusal = UNKNOWN_SERVER_ERROR  # for a partition the answer does not name
    try:
        if proto.partitions:
            answer = call.invoke("ListOffsets", call.gateway.service.queries.ListOffsets, proto)
            results = {(r.topic, r.partition): r for r in answer.partitions}
    except SeglogError as exc:
        refusal = data_error_code(DataApi.LIST_OFFSETS, exc)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = results.get((topic.name, p.partition_index))
            if result is not None and result.error == common_pb2.NONE:
                partitions.append(
                    partition_class(
                        partition_index=p.partition_index,
                        error_code=NONE,
                        timestamp=result.timestamp,
                        offset=result.offset,
                        leader_epoch=result.leader_epoch,
                    )
                )
                continue
            if topic.name not in described:
                error = TOPIC_AUTHORIZATION_FAILED
            elif result is None:
                error = refusal
            else:
                error = data_error_code(
                    DataApi.LIST_OFFSETS, common_pb2.ErrorCode.Name(result.error)
                )
            partitions.append(
                partition_class(
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=NO_OFFSET,
                    offset=NO_OFFSET,
                    leader_epoch=-1,
                )
            )
        topics.append(topic_class(name=topic.name, partitions=partitions))
    return response_class(throttle_time_ms=0, topics=topics)


def register(table: ApiTable, gateway: Gateway) -> None:
    table.register(ListOffsetsRequest, 1, 10, list_offsets)
