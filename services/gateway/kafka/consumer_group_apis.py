"""Kafka's consumer group protocol (KIP-848): ConsumerGroupHeartbeat 0–1 and
ConsumerGroupDescribe 0–1, on the gateway's consumer group coordinator
(groups/consumer_groups.py). Their layouts are Kafka 4.3's own JSON schemas
(consumer_schemas/), read by kafka-python's codec, which has no classes for these APIs.

Authorization is Kafka's: Read on the group to heartbeat, Describe on it to describe it, and
Describe on each topic a member subscribes to by name (TOPIC_AUTHORIZATION_FAILED naming
them otherwise). Errors are the ones the schemas list; a member the coordinator does not
know answers UNKNOWN_MEMBER_ID, an epoch it cannot take FENCED_MEMBER_EPOCH (the Java
consumer and librdkafka both join again with epoch 0 on either).
"""

from __future__ import annotations

import types
from typing import Any

from kafka.protocol.api_message import ApiMessage

from seglog.errors import CoordinatorNotAvailableError, PermissionDeniedError, SeglogError
from seglog.semconv import GROUP

from ..groups.consumer_group_state import ConsumerGroup
from ..groups.consumer_groups import ConsumerGroups, ConsumerHeartbeat
from . import consumer_schemas
from .api_table import ApiTable
from .error_codes import NONE, TOPIC_AUTHORIZATION_FAILED
from .group_apis import client_host, group_error_code, on_coordinator
from .kafka_call import KafkaCall
from .topic_ids import from_wire, to_wire

# Kafka's codes for the KIP-848 errors (Errors.java); error_codes.py maps seglog's reasons
# to them, these name them for the tests.
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # KIP-1099's MemberType


def _message(name: str) -> Any:
    """The codec's message class for Kafka's schema `name` (consumer_schemas/<name>.json)."""

    def body(namespace: dict[str, Any]) -> None:
        namespace["__module__"] = __name__  # the table finds a response class beside it

    return types.new_class(name, (ApiMessage,), {"load_json": consumer_schemas}, body)


ConsumerGroupHeartbeatRequest = _message("ConsumerGroupHeartbeatRequest")
ConsumerGroupHeartbeatResponse = _message("ConsumerGroupHeartbeatResponse")
ConsumerGroupDescribeRequest = _message("ConsumerGroupDescribeRequest")
ConsumerGroupDescribeResponse = _message("ConsumerGroupDescribeResponse")


def _consumer_groups(call: KafkaCall) -> ConsumerGroups:
    consumer_groups = call.core.groups.consumer_groups
    if consumer_groups is None:  # a core without them (none is built so on a gateway)
        raise CoordinatorNotAvailableError("this gateway has no consumer group coordinator")
    return consumer_groups


class _TopicsDenied(PermissionDeniedError):
    """Topics a member subscribes to by name that its principal may not Describe."""


def consumer_group_error_code(error: BaseException) -> int:
    """Kafka's code for an error of a consumer group call (authorization: the group's)."""
    return group_error_code(error)


def heartbeat(call: KafkaCall, request: Any) -> Any:
    response_class = ConsumerGroupHeartbeatResponse[call.version]
    consumer_groups = _consumer_groups(call)
    owned = None
    if request.topic_partitions is not None:
        owned = {from_wire(t.topic_id): frozenset(t.partitions) for t in request.topic_partitions}
    hb = ConsumerHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        topics=None
        if request.subscribed_topic_names is None
        else tuple(request.subscribed_topic_names),
        regex=request.subscribed_topic_regex if call.version >= 1 else None,
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=call.client_id or "",
        client_host=client_host(call),
        topic_describable=lambda topic: call.allowed("Describe", "topic", topic),
    )

    # The span names the group and the epoch the member came with (0: joining, -1: leaving).
    call.attributes[GROUP] = hb.group_id
    call.attributes["seglog.group.member_epoch"] = str(hb.member_epoch)

    def work() -> Any:
        # Read on the group first (on_coordinator), then Describe on each topic named, as
        # Kafka's KafkaApis authorizes this API.
        denied = sorted(t for t in hb.topics or () if not call.allowed("Describe", "topic", t))
        if denied:
            raise _TopicsDenied(f"topics {', '.join(denied)} may not be described")
        return consumer_groups.heartbeat(hb)

    try:
        answer = on_coordinator(call, "ConsumerGroupHeartbeat", hb.group_id, work)
    except SeglogError as exc:
        code = consumer_group_error_code(exc)
        if isinstance(exc, _TopicsDenied):
            code = TOPIC_AUTHORIZATION_FAILED
        return response_class(
            throttle_time_ms=0,
            error_code=code,
            error_message=str(exc),
            member_id=None,
            member_epoch=-1,
            heartbeat_interval_ms=0,
            assignment=None,
        )
    assignment = None
    if answer.assignment is not None:
        assignment = response_class.Assignment(
            topic_partitions=[
                response_class.Assignment.TopicPartitions(topic_id=to_wire(t), partitions=sorted(p))
                for t, p in sorted(answer.assignment.items())
                if p
            ]
        )
    return response_class(
        throttle_time_ms=0,
        error_code=NONE,
        error_message=None,
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        heartbeat_interval_ms=answer.heartbeat_interval_ms,
        assignment=assignment,
    )


def describe(call: KafkaCall, request: Any) -> Any:
    response_class = ConsumerGroupDescribeResponse[call.version]
    group_class = response_class.DescribedGroup
    consumer_groups = _consumer_groups(call)
    names = {topic_id: name for name, topic_id in _topic_ids(call).items()}

    def one(group_id: str) -> Any:
        try:
            group = on_coordinator(
                call,
                "ConsumerGroupDescribe",
                group_id,
                lambda: consumer_groups.describe(group_id),
            )
        except SeglogError as exc:
            return group_class(
                error_code=consumer_group_error_code(exc),
                error_message=str(exc),
                group_id=group_id,
                group_state="Dead",
                group_epoch=-1,
                assignment_epoch=-1,
                assignor_name="",
                members=[],
            )
        return _described(response_class, group, names)

    return response_class(throttle_time_ms=0, groups=[one(g) for g in request.group_ids])


def _topic_ids(call: KafkaCall) -> dict[str, str]:
    return {name: topic.topic_id for name, topic in call.core.registry.topics.items()}


def _described(response_class: Any, group: ConsumerGroup, names: dict[str, str]) -> Any:
    group_class = response_class.DescribedGroup

    assignment_class = group_class.Member.Assignment

    def assignment(parts: dict[str, frozenset[int]]) -> Any:
        return assignment_class(
            topic_partitions=[
                assignment_class.TopicPartitions(
                    topic_id=to_wire(t), topic_name=names.get(t, ""), partitions=sorted(p)
                )
                for t, p in sorted(parts.items())
                if p
            ]
        )

    members = [
        group_class.Member(
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.topics),
            subscribed_topic_regex=m.regex,
            assignment=assignment(m.assigned),
            target_assignment=assignment(group.target.get(m.member_id, {})),
            # A member still on the classic protocol (an online migration) says so.
            member_type=CLASSIC_MEMBER_TYPE if m.classic is not None else CONSUMER_MEMBER_TYPE,
        )
        for m in group.members.values()
    ]
    return group_class(
        error_code=NONE,
        error_message=None,
        group_id=group.group_id,
        group_state=group.state,
        group_epoch=group.epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.assignor or "uniform",
        members=members,
        authorized_operations=-2147483648,
    )


def register(table: ApiTable) -> None:
    table.register(ConsumerGroupHeartbeatRequest, 0, 1, heartbeat)
    table.register(ConsumerGroupDescribeRequest, 0, 1, describe)
