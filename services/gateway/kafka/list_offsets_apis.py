"""ListOffsets 1–10 over the broker core's data plane (asked of each partition's leader):
EARLIEST (-2), LATEST (-1: the high watermark), MAX_TIMESTAMP (-3, v7+: the offset of the
record with the largest timestamp), EARLIEST_LOCAL (-4, v8+: the log start, seglog keeping
every segment locally) and LATEST_TIERED (-5, v9+: offset -1, as Kafka answers for a log
without remote storage), and by time. v10's timeout_ms is for reads from remote storage,
which seglog has none of. isolation_level READ_COMMITTED (v2+) answers below the last
stable offset (LATEST is the LSO), as Kafka's broker does. A topic the caller may not
Describe is refused on its own partitions (TOPIC_AUTHORIZATION_FAILED), as Kafka's broker
refuses it."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from seglog.errors import SeglogError

from ..routing.data_plane import ListedOffset, OffsetQuery
from .api_table import ApiTable
from .error_codes import NONE
from .error_table import DataApi, data_error_code
from .kafka_call import KafkaCall

NO_OFFSET = -1


def list_offsets(call: KafkaCall, request: Any) -> Any:
    response_class = ListOffsetsResponse[call.version]
    topic_class = response_class.ListOffsetsTopicResponse
    partition_class = topic_class.ListOffsetsPartitionResponse
    call.attributes["kafka.topics"] = ",".join(dict.fromkeys(t.name for t in request.topics[:16]))
    isolation = request.isolation_level if call.version >= 2 else 0
    queries = [
        OffsetQuery(topic.name, p.partition_index, p.timestamp, p.current_leader_epoch, isolation)
        for topic in request.topics
        for p in topic.partitions
    ]
    try:
        results = call.core.data_plane.list_offsets(call.caller, queries)
    except SeglogError as exc:  # refused whole (too many partitions)
        results = [ListedOffset(q.topic, q.partition, exc) for q in queries]
    answers = iter(results)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = next(answers)
            failed = result.error is not None
            partitions.append(
                partition_class(
                    partition_index=p.partition_index,
                    error_code=(
                        data_error_code(DataApi.LIST_OFFSETS, result.error)
                        if result.error is not None
                        else NONE
                    ),
                    timestamp=NO_OFFSET if failed else result.timestamp,
                    offset=NO_OFFSET if failed else result.offset,
                    leader_epoch=-1 if failed else result.leader_epoch,
                )
            )
        topics.append(topic_class(name=topic.name, partitions=partitions))
    return response_class(throttle_time_ms=0, topics=topics)


def register(table: ApiTable) -> None:
    table.register(ListOffsetsRequest, 1, 10, list_offsets)
