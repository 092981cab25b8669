"""Kafka's AlterShareGroupOffsets (91) v0 and DeleteShareGroupOffsets (92) v0 on the share
core's offsets admin (share/offsets_admin.py): what `kafka-share-groups --reset-offsets
--execute` and `--delete-offsets` send. A refused or non-empty group is the top-level error
(GROUP_AUTHORIZATION_FAILED, NON_EMPTY_GROUP, ...); a topic's own refusal (unknown,
TOPIC_AUTHORIZATION_FAILED) is answered on its partitions (alter) or on it (delete).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seglog.errors import SeglogError

from ..share.offsets_admin import ShareOffsetsAdmin
from .error_codes import NONE
from .share_group_apis import share_error_code
from .share_messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)
from .topic_ids import to_wire

if TYPE_CHECKING:
    from .api_table import ApiTable
    from .kafka_call import KafkaCall


def register(table: ApiTable) -> None:
    table.register(AlterShareGroupOffsetsRequest, 0, 0, alter_share_group_offsets)
    table.register(DeleteShareGroupOffsetsRequest, 0, 0, delete_share_group_offsets)


def _topic_id(call: KafkaCall, topic: str) -> Any:
    return to_wire(call.core.registry.image.topic_id_of(topic))  # zero for an unknown topic


def _code(error: SeglogError | None) -> tuple[int, str | None]:
    return (NONE, None) if error is None else (share_error_code(error, "topic"), str(error))


def alter_share_group_offsets(call: KafkaCall, request: Any) -> Any:
    response_class = AlterShareGroupOffsetsResponse[call.version]
    topic_class = response_class.AlterShareGroupOffsetsResponseTopic
    partition_class = topic_class.AlterShareGroupOffsetsResponsePartition
    starts = {
        (t.topic_name, p.partition_index): p.start_offset
        for t in request.topics
        for p in t.partitions
    }
    try:
        results = ShareOffsetsAdmin(call.core.share).alter(call.caller, request.group_id, starts)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=share_error_code(exc),
            error_message=str(exc),
            responses=[],
        )
    by_topic: dict[str, list[Any]] = {}
    for result in results:
        code, message = _code(result.error)
        by_topic.setdefault(result.topic, []).append(
            partition_class(
                partition_index=result.partition, error_code=code, error_message=message
            )
        )
    return response_class(
        throttle_time_ms=0,
        error_code=NONE,
        error_message=None,
        responses=[
            topic_class(topic_name=topic, topic_id=_topic_id(call, topic), partitions=partitions)
            for topic, partitions in by_topic.items()
        ],
    )


def delete_share_group_offsets(call: KafkaCall, request: Any) -> Any:
    response_class = DeleteShareGroupOffsetsResponse[call.version]
    topic_class = response_class.DeleteShareGroupOffsetsResponseTopic
    topics = list(dict.fromkeys(t.topic_name for t in request.topics))
    try:
        results = ShareOffsetsAdmin(call.core.share).delete(call.caller, request.group_id, topics)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=share_error_code(exc),
            error_message=str(exc),
            responses=[],
        )
    responses = []
    for topic, error in results:
        code, message = _code(error)
        responses.append(
            topic_class(
                topic_name=topic,
                topic_id=_topic_id(call, topic),
                error_code=code,
                error_message=message,
            )
        )
    return response_class(
        throttle_time_ms=0, error_code=NONE, error_message=None, responses=responses
    )
