"""DescribeTopicPartitions 0 (KIP-966), what Kafka's Admin client describes topics with first
(`kafka-topics --describe`): each topic with its id and its partitions as Metadata answers
them (the storage nodes as the brokers, brokers.py), plus each partition's eligible leader
replicas, in pages.

As Kafka's broker (DescribeTopicPartitionsRequestHandler): no topic named means every topic
the principal may Describe; named topics are answered in name order, one the principal may
not Describe TOPIC_AUTHORIZATION_FAILED with the zero id (after the others), one that does
not exist UNKNOWN_TOPIC_OR_PARTITION. At most `response_partition_limit` partitions (and
never more than MAX_PARTITIONS, Kafka's max.request.partition.size.limit) are answered,
starting at the request's cursor; `next_cursor` names the first partition left out. A cursor
whose topic is not among the named ones is INVALID_REQUEST. Every topic answered carries the
operations the principal may do on it (Kafka always sets them here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    ACLOperation,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)

from seglog.errors import SeglogError

from .brokers import BrokerView, broker_view
from .error_codes import (
    INVALID_REQUEST,
    LEADER_NOT_AVAILABLE,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    kafka_error_code,
)
from .topic_ids import ZERO, to_wire

if TYPE_CHECKING:
    from ..cluster.metadata_image import Topic
    from .api_table import ApiTable
    from .kafka_call import KafkaCall

NO_LEADER = -1
MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit default
# The operations Kafka authorizes on a topic, as the bits of TopicAuthorizedOperations.
TOPIC_OPERATIONS = {
    ACLOperation.READ: "Read",
    ACLOperation.WRITE: "Write",
    ACLOperation.CREATE: "Create",
    ACLOperation.DELETE: "Delete",
    ACLOperation.ALTER: "Alter",
    ACLOperation.DESCRIBE: "Describe",
    ACLOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    ACLOperation.ALTER_CONFIGS: "AlterConfigs",
}
_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_Partition = _Topic.DescribeTopicPartitionsResponsePartition
_Cursor = DescribeTopicPartitionsResponse.Cursor


def register(table: ApiTable) -> None:
    table.register(DescribeTopicPartitionsRequest, 0, 0, describe_topic_partitions)


def describe_topic_partitions(call: KafkaCall, request: Any) -> Any:
    response_class = DescribeTopicPartitionsResponse[call.version]
    registry = call.core.registry
    authorization = call.core.authorization
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    every_topic = not request.topics
    if every_topic:
        names = sorted(n for n in registry.topics if n >= after)
    else:
        names = sorted({t.name for t in request.topics if t.name is not None and t.name >= after})
        if cursor is not None and cursor.topic_name not in names:
            return response_class(
                throttle_time_ms=0,
                topics=[
                    _Topic(error_code=INVALID_REQUEST, name=t.name, topic_id=ZERO, partitions=[])
                    for t in request.topics
                ],
                next_cursor=None,
            )
    call.attributes["kafka.topics"] = "*" if every_topic else ",".join(names[:16])
    allowed = {n: authorization.allows(call.caller, "Describe", "topic", n) for n in names}
    first_index = cursor.partition_index if cursor is not None and allowed.get(after) else 0
    limit = max(0, min(MAX_PARTITIONS, request.response_partition_limit))
    view = broker_view(call.core, call.listener)
    topics: list[Any] = []
    next_cursor = None
    authorized = [n for n in names if allowed[n]]
    for position, name in enumerate(authorized):
        topic = registry.topics.get(name)
        start = first_index if name == after else 0
        if topic is None:
            if not every_topic:
                topics.append(
                    _Topic(
                        error_code=UNKNOWN_TOPIC_OR_PARTITION,
                        name=name,
                        topic_id=ZERO,
                        partitions=[],
                    )
                )
            continue
        if limit <= 0:
            next_cursor = _Cursor(topic_name=name, partition_index=start)
            break
        end = min(len(topic.partitions), start + limit)
        topics.append(_described(call, topic, range(start, end), view))
        limit -= end - start
        if end < len(topic.partitions):
            next_cursor = _Cursor(topic_name=name, partition_index=end)
            break
        if limit <= 0 and position + 1 < len(authorized):
            next_cursor = _Cursor(topic_name=authorized[position + 1], partition_index=0)
            break
    if not every_topic:
        topics += [
            _Topic(error_code=TOPIC_AUTHORIZATION_FAILED, name=n, topic_id=ZERO, partitions=[])
            for n in names
            if not allowed[n]
        ]
    return response_class(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


def _described(call: KafkaCall, topic: Topic, indexes: range, view: BrokerView) -> Any:
    registry = call.core.registry
    authorization = call.core.authorization
    live: dict[int, bool] = {}  # is_live takes the registry's lock: once per node
    partitions = []
    for index in indexes:
        assignment = topic.partitions[index]
        error, leader = NONE, NO_LEADER
        try:
            route = registry.route(topic.name, index)
            leader = view.leader(topic.name, index, route.leader)
            if not route.live or leader not in view.ids:
                error, leader = LEADER_NOT_AVAILABLE, NO_LEADER
        except SeglogError as exc:
            error = kafka_error_code(exc) or LEADER_NOT_AVAILABLE
        partitions.append(
            _Partition(
                error_code=error,
                partition_index=index,
                leader_id=leader,
                leader_epoch=assignment.leader_epoch,
                replica_nodes=list(assignment.replicas),
                isr_nodes=list(assignment.isr),
                eligible_leader_replicas=list(assignment.elr),
                last_known_elr=[],
                offline_replicas=[
                    r for r in assignment.replicas if not live.setdefault(r, registry.is_live(r))
                ],
            )
        )
    return _Topic(
        error_code=NONE,
        name=topic.name,
        topic_id=to_wire(topic.topic_id),
        is_internal=topic.internal,
        partitions=partitions,
        # An int32 here, bit n for the operation of code n (Kafka's Utils.to32BitField).
        topic_authorized_operations=sum(
            1 << int(code)
            for code, operation in TOPIC_OPERATIONS.items()
            if authorization.allows(call.caller, operation, "topic", topic.name)
        ),
    )
