"""Kafka's group administration: DescribeGroups 0–5, ListGroups 0–5, DeleteGroups 0–2, for
Kafka clients' and tools' admin calls (kafka-consumer-groups.sh, AdminClient).

Groups of both kinds are shown: a Kafka classic group with its members' own subscription and
assignment bytes; a group of seglog's gRPC consumers (assigned by the coordinator) with the
consumer protocol's bytes of its members' topics and partitions, so Kafka's tools read it.
As Kafka's broker does, members' bytes and the protocol are shown only while the group is
Stable, a group that does not exist is described as Dead, and each group is authorized on
its own: a group the principal may not Describe (Delete) answers GROUP_AUTHORIZATION_FAILED,
and ListGroups without Describe on the cluster lists only the groups the principal may
Describe. KIP-848 consumer groups are listed with type "consumer" (ListGroups v5, whose
TypesFilter picks kinds) and their own state; DescribeGroups answers Dead for them, as Kafka
does (ConsumerGroupDescribe describes them: consumer_group_apis.py).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

from seglog.errors import SeglogError

from ..groups.group_state import CLASSIC, STABLE, Group, Member
from ..groups.offsets_formats import encode_assignment, encode_subscription
from .api_table import ApiTable
from .error_codes import NONE, kafka_error_code
from .group_apis import group_error_code
from .kafka_call import KafkaCall

DEAD = "Dead"
# ListGroups v5's group types, lower-cased (KIP-848 consumer groups, KIP-932 share groups).
CLASSIC_TYPE, CONSUMER_TYPE, SHARE_TYPE = "classic", "consumer", "share"


def _is_consumer_group(call: KafkaCall, group_id: str) -> bool:
    consumer_groups = call.core.groups.consumer_groups
    return consumer_groups is not None and consumer_groups.is_consumer_group(group_id)


EMPTY = "Empty"


def _member_bytes(group: Group, member: Member) -> tuple[bytes, bytes]:
    if group.kind == CLASSIC:
        return member.metadata_for(group.strategy), member.assignment_bytes
    return encode_subscription(member.topics), encode_assignment(member.assignment)


def describe_groups(call: KafkaCall, request: Any) -> Any:
    response_class = DescribeGroupsResponse[call.version]
    group_class = response_class.DescribedGroup
    member_class = group_class.DescribedGroupMember
    core = call.core

    def describe(group_id: str) -> Any:
        found = core.group_calls.look_up(call.caller, group_id)
        group = found.group
        if group is None and _is_consumer_group(call, group_id):
            # A KIP-848 group is not a classic one: Kafka's DescribeGroups (v0-5) answers
            # Dead for it (its classicGroup lookup fails); ConsumerGroupDescribe shows it.
            return group_class(
                error_code=NONE,
                group_id=group_id,
                group_state=DEAD,
                protocol_type="",
                protocol_data="",
                members=[],
            )
        if group is None:
            known = found.has_offsets
            return group_class(
                error_code=NONE,
                group_id=group_id,
                group_state=EMPTY if known else DEAD,
                protocol_type="",
                protocol_data="",
                members=[],
            )
        members = []
        for member in group.members.values():
            metadata, assignment = (
                _member_bytes(group, member) if group.state == STABLE else (b"", b"")
            )
            members.append(
                member_class(
                    member_id=member.member_id,
                    group_instance_id=member.group_instance_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    member_metadata=metadata,
                    member_assignment=assignment,
                )
            )
        return group_class(
            error_code=NONE,
            group_id=group_id,
            group_state=group.state,
            protocol_type=group.protocol_type,
            protocol_data=group.strategy if group.state == STABLE else "",
            members=members,
        )

    described = []
    for group_id in request.groups:
        try:
            described.append(describe(group_id))
        except SeglogError as exc:
            described.append(
                group_class(
                    error_code=group_error_code(exc),
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
    return response_class(throttle_time_ms=0, groups=described)


def list_groups(call: KafkaCall, request: Any) -> Any:
    """v5 names each group's type and filters by it (Kafka's GroupType names, compared
    case-insensitively as Kafka's broker does): seglog's groups are "classic", its share
    groups (share/) "share"; `kafka-share-groups --list` asks for share groups alone."""
    response_class = ListGroupsResponse[call.version]
    try:
        listing = call.core.groups.listing(call.caller)
    except SeglogError as exc:
        return response_class(throttle_time_ms=0, error_code=kafka_error_code(exc), groups=[])
    wanted = {s.lower() for s in request.states_filter} if call.version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if call.version >= 5 else set()
    groups = []
    consumer_groups = call.core.groups.consumer_groups
    kip848 = {g.group_id: g.state for g in (consumer_groups.snapshots() if consumer_groups else [])}
    rows = [
        (group_id, kip848[group_id], "consumer", CONSUMER_TYPE)
        if group is None and group_id in kip848
        else (
            group_id,
            group.state if group is not None else EMPTY,
            group.protocol_type if group is not None else "",
            CLASSIC_TYPE,
        )
        for group_id, group in listing
    ]
    rows += [
        (group_id, state, SHARE_TYPE, SHARE_TYPE)
        for group_id, state in call.core.share.listing(call.caller)
    ]
    for group_id, state, protocol_type, group_type in rows:
        if wanted and state.lower() not in wanted:
            continue
        if (types and group_type not in types) or (call.version < 5 and group_type == SHARE_TYPE):
            continue
        groups.append(
            response_class.ListedGroup(
                group_id=group_id,
                protocol_type=protocol_type,
                group_state=state,
                group_type=group_type.capitalize(),
            )
        )
    return response_class(throttle_time_ms=0, error_code=NONE, groups=groups)


def delete_groups(call: KafkaCall, request: Any) -> Any:
    response_class = DeleteGroupsResponse[call.version]
    results = []
    for group_id in request.groups_names:
        try:
            call.core.groups.delete_group(call.caller, group_id)
            code = NONE
        except SeglogError as exc:
            code = group_error_code(exc)
        results.append(response_class.DeletableGroupResult(group_id=group_id, error_code=code))
    return response_class(throttle_time_ms=0, results=results)


def register(table: ApiTable) -> None:
    table.register(DescribeGroupsRequest, 0, 5, describe_groups)
    table.register(ListGroupsRequest, 0, 5, list_groups)
    table.register(DeleteGroupsRequest, 0, 2, delete_groups)
