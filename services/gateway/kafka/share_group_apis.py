"""Share groups' membership over Kafka's protocol (KIP-932): ShareGroupHeartbeat 1 and
ShareGroupDescribe 1 (version 0 was Kafka 4.0's early access, removed in 4.1), and
DescribeShareGroupOffsets 0–1 for `kafka-share-groups --describe`'s offsets. The core is
share/share_core.py; this decodes, calls it and encodes.

Topics go by id on this API: an assignment names topic ids (the registry's), a subscription
names topics. Error codes as ShareGroupHeartbeatResponse.json lists them: authorization of the
group GROUP_AUTHORIZATION_FAILED, of a subscribed topic TOPIC_AUTHORIZATION_FAILED,
FENCED_MEMBER_EPOCH for a stale epoch (the Java consumer rejoins at 0), UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

from typing import Any

from kafka import errors as kafka_errors

from seglog.coordinator_errors import (
    FencedMemberEpochError,
    InvalidRecordStateError,
    InvalidShareSessionEpochError,
    ShareSessionLimitReachedError,
    ShareSessionNotFoundError,
)
from seglog.errors import PermissionDeniedError, SeglogError

from ..routing.data_plane import OffsetQuery
from ..share.partition_ops import ShareStart
from ..share.share_membership import ShareHeartbeat
from .api_table import ApiTable
from .error_codes import (
    GROUP_AUTHORIZATION_FAILED,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    kafka_error_code,
)
from .kafka_call import KafkaCall
from .share_messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from .topic_ids import to_wire

# Kafka's codes for the share errors (Errors.java); kafka-python names them too.
_SHARE_CODES: dict[type[SeglogError], int] = {
    InvalidRecordStateError: 121,
    ShareSessionNotFoundError: 122,
    InvalidShareSessionEpochError: 123,
    FencedMemberEpochError: 110,
    ShareSessionLimitReachedError: 133,
}
ALL_OPERATIONS_OMITTED = -(2**31)  # Kafka's "authorized operations not asked for"
LATEST_TIMESTAMP = -1  # ListOffsets: the high watermark


def share_error_code(error: BaseException, resource: str = "group") -> int:
    for kind, code in _SHARE_CODES.items():
        if isinstance(error, kind):
            return code
    if isinstance(error, PermissionDeniedError):
        return GROUP_AUTHORIZATION_FAILED if resource == "group" else TOPIC_AUTHORIZATION_FAILED
    return kafka_error_code(error, "group" if resource == "group" else "topic")


def _client_host(call: KafkaCall) -> str:
    return f"/{call.identity.peer_host}"  # Kafka's InetAddress.toString


def _assignment(
    call: KafkaCall, assignment_class: Any, assignment: dict[str, tuple[int, ...]], named: bool
) -> Any:
    topics = []
    for topic, partitions in sorted(assignment.items()):
        topic_id = call.core.registry.image.topic_id_of(topic)
        if not topic_id:
            continue
        fields = {"topic_id": to_wire(topic_id), "partitions": list(partitions)}
        if named:
            fields["topic_name"] = topic
        topics.append(assignment_class.TopicPartitions(**fields))
    return assignment_class(topic_partitions=topics)


def share_group_heartbeat(call: KafkaCall, request: Any) -> Any:
    response_class = ShareGroupHeartbeatResponse[call.version]
    beat = ShareHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        rack_id=request.rack_id,
        subscribed_topics=None
        if request.subscribed_topic_names is None
        else tuple(request.subscribed_topic_names),
        client_id=call.client_id or "",
        client_host=_client_host(call),
    )
    try:
        answer = call.core.share.heartbeat(call.caller, beat)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=share_error_code(exc, exc.details.get("resource", "group")),
            error_message=str(exc),
            member_id=None,
            member_epoch=0,
            heartbeat_interval_ms=0,
            assignment=None,
        )
    return response_class(
        throttle_time_ms=0,
        error_code=NONE,
        error_message=None,
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval_ms=answer.heartbeat_interval_ms,
        assignment=None
        if answer.assignment is None
        else _assignment(call, response_class.Assignment, answer.assignment, named=False),
    )


def share_group_describe(call: KafkaCall, request: Any) -> Any:
    response_class = ShareGroupDescribeResponse[call.version]
    group_class = response_class.DescribedGroup
    described = []
    for group in call.core.share.describe(call.caller, list(request.group_ids)):
        if group.error is not None or group.state == "Dead":
            error = group.error
            described.append(
                group_class(
                    error_code=share_error_code(error)
                    if error is not None
                    else int(kafka_errors.GroupIdNotFoundError.errno),
                    error_message=str(error)
                    if error is not None
                    else f"Group {group.group_id} not found.",
                    group_id=group.group_id,
                    group_state="Dead",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=[],
                    authorized_operations=ALL_OPERATIONS_OMITTED,
                )
            )
            continue
        members = [
            group_class.Member(
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed),
                assignment=_assignment(
                    call, group_class.Member.Assignment, m.assignment, named=True
                ),
            )
            for m in group.members
        ]
        described.append(
            group_class(
                error_code=NONE,
                error_message=None,
                group_id=group.group_id,
                group_state=group.state,
                group_epoch=group.epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor,
                members=members,
                authorized_operations=ALL_OPERATIONS_OMITTED,
            )
        )
    return response_class(throttle_time_ms=0, groups=described)


def describe_share_group_offsets(call: KafkaCall, request: Any) -> Any:
    response_class = DescribeShareGroupOffsetsResponse[call.version]
    group_class = response_class.DescribeShareGroupOffsetsResponseGroup
    topic_class = group_class.DescribeShareGroupOffsetsResponseTopic
    partition_class = topic_class.DescribeShareGroupOffsetsResponsePartition
    registry = call.core.registry
    groups = []
    for asked in request.groups:
        try:
            starts = call.core.share.start_offsets(call.caller, asked.group_id)
        except SeglogError as exc:
            groups.append(
                group_class(
                    group_id=asked.group_id,
                    topics=[],
                    error_code=share_error_code(exc),
                    error_message=str(exc),
                )
            )
            continue
        wanted: dict[str, list[int] | None] = (
            {t: None for t, _ in starts}
            if asked.topics is None
            else {t.topic_name: list(t.partitions) for t in asked.topics}
        )
        lags = _lags(call, starts)
        topics = []
        for topic, partitions in wanted.items():
            indexes = (
                partitions if partitions is not None else sorted(p for t, p in starts if t == topic)
            )
            topic_id = registry.image.topic_id_of(topic)
            topics.append(
                topic_class(
                    topic_name=topic,
                    topic_id=to_wire(topic_id),
                    partitions=[
                        partition_class(
                            partition_index=p,
                            start_offset=starts[(topic, p)].start_offset
                            if (topic, p) in starts
                            else -1,
                            leader_epoch=-1,
                            lag=lags.get((topic, p), -1),
                            error_code=NONE,
                            error_message=None,
                        )
                        for p in indexes
                    ],
                )
            )
        groups.append(
            group_class(group_id=asked.group_id, topics=topics, error_code=NONE, error_message=None)
        )
    return response_class(throttle_time_ms=0, groups=groups)


def _lags(call: KafkaCall, starts: dict[tuple[str, int], ShareStart]) -> dict[tuple[str, int], int]:
    """Each share partition's lag as Kafka 4.3 counts it: its high watermark less its start
    offset and its records past the start already done with (-1 left out: not known)."""
    keys = sorted(starts)
    listed = call.core.data_plane.list_offsets(
        call.caller, [OffsetQuery(topic, p, LATEST_TIMESTAMP) for topic, p in keys]
    )
    return {
        key: max(0, got.offset - starts[key].start_offset - starts[key].delivery_complete_count)
        for key, got in zip(keys, listed, strict=True)
        if got.error is None and got.offset >= 0
    }


def register(table: ApiTable) -> None:
    table.register(ShareGroupHeartbeatRequest, 1, 1, share_group_heartbeat)
    table.register(ShareGroupDescribeRequest, 1, 1, share_group_describe)
    table.register(DescribeShareGroupOffsetsRequest, 0, 1, describe_share_group_offsets)
