"""A share group's (KIP-932) membership records in `__consumer_offsets`, in Kafka's formats:
the message classes are made by kafka-python's codec from Kafka 4.3.1's own JSON schemas
(record_schemas/, copied unchanged from kafka-group-coordinator-4.3.1.jar), so the bytes
are the ones Kafka's group coordinator writes and reads.

A key is an int16 record type (the schema's apiKey) then the key struct (version 0, not
flexible: a string is int16 length + UTF-8); a value is an int16 version (0) then the value
struct (flexible: compact strings and arrays, tagged fields at the end of each struct). A
null value (tombstone) deletes what the key names.

    type 10 ShareGroupMemberMetadataKey (group, member)  -> RackId?, ClientId, ClientHost,
            SubscribedTopicNames[]
    type 11 ShareGroupMetadataKey (group)                -> Epoch, MetadataHash (written
            as 0: seglog compares the subscribed topics' partition counts instead)
    type 12 ShareGroupTargetAssignmentMetadataKey (group) -> AssignmentEpoch, tagged 0
            AssignmentTimestamp
    type 13 ShareGroupTargetAssignmentMemberKey (group, member) -> [TopicId, Partitions[]]
    type 14 ShareGroupCurrentMemberAssignmentKey (group, member) -> MemberEpoch,
            PreviousMemberEpoch, State int8 (0: stable), AssignedPartitions[TopicId,
            Partitions[]]
    type 15 ShareGroupStatePartitionMetadataKey (group)  -> InitializingTopics[],
            InitializedTopics[] (TopicId, TopicName, Partitions[]), DeletingTopics[]
            (TopicId, TopicName)

Kafka writes them in this order when a member joins: member metadata (10), group epoch (11),
target assignment members (13) then its epoch (12), current assignments (14); a leaving
member's 14, 13 and 10 are tombstoned, then the new epoch (11). Type 9 (partition metadata,
gone since 4.1) is read past. Every key starts with the group id, as a consumer group's do.
"""

from __future__ import annotations

import struct
import types
from collections.abc import Mapping
from typing import Any

from kafka.protocol.api_data import ApiData

from ..groups.consumer_group_records import SHARE_GROUP_RECORD_TYPES, topic_id_of, uuid_of
from . import record_schemas

MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15
STABLE_STATE = 0  # MemberState.STABLE: share groups never revoke before reassigning
_INT16 = struct.Struct(">h")

Record = tuple[bytes, bytes | None]  # key, value (None: a tombstone)
# Topic id (the registry's string form) -> partitions.
Partitions = Mapping[str, tuple[int, ...]]


def _data(cls: Any, json: dict[str, Any]) -> dict[str, Any]:
    json["type"] = "data"  # the codec's plain data class reads coordinator records alike
    return json


def _schema(name: str) -> Any:
    """The codec's class for Kafka's schema `name` (record_schemas/<name>.json)."""

    def body(namespace: dict[str, Any]) -> None:
        namespace["json_patch"] = classmethod(_data)

    return types.new_class(name, (ApiData,), {"load_json": record_schemas}, body)


_NAMES = {
    MEMBER_METADATA: "ShareGroupMemberMetadata",
    GROUP_METADATA: "ShareGroupMetadata",
    TARGET_ASSIGNMENT_METADATA: "ShareGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ShareGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ShareGroupCurrentMemberAssignment",
    STATE_PARTITION_METADATA: "ShareGroupStatePartitionMetadata",
}
KEY_CLASSES = {kind: _schema(name + "Key") for kind, name in _NAMES.items()}
VALUE_CLASSES = {kind: _schema(name + "Value") for kind, name in _NAMES.items()}


def _key(record_type: int, **fields: Any) -> bytes:
    body = KEY_CLASSES[record_type](version=0, **fields).encode(version=0, header=False)
    return _INT16.pack(record_type) + bytes(body)


def _value(record_type: int, **fields: Any) -> bytes:
    body = VALUE_CLASSES[record_type](version=0, **fields).encode(version=0, header=False)
    return _INT16.pack(0) + bytes(body)


def record_type(key: bytes) -> int:
    return int(_INT16.unpack_from(key, 0)[0])


def decode_key(key: bytes) -> Any:
    return KEY_CLASSES[record_type(key)].decode(key[2:], version=0, header=False)


def decode_value(key: bytes, value: bytes) -> Any:
    (version,) = _INT16.unpack_from(value, 0)
    if version != 0:
        raise ValueError(f"record type {record_type(key)}: value version {version} is unknown")
    return VALUE_CLASSES[record_type(key)].decode(value[2:], version=0, header=False)


# -- the records a change writes ---------------------------------------------------------


def _topic_partitions(partitions: Partitions) -> list[dict[str, Any]]:
    return [
        {"topic_id": uuid_of(topic_id), "partitions": sorted(partitions[topic_id])}
        for topic_id in sorted(partitions)
        if partitions[topic_id]
    ]


def member_metadata(group_id: str, member_id: str, member: Any | None) -> Record:
    """`member`: a ShareMember (None: the member left)."""
    key = _key(MEMBER_METADATA, group_id=group_id, member_id=member_id)
    if member is None:
        return key, None
    return key, _value(
        MEMBER_METADATA,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed),
    )


def group_epoch(group_id: str, epoch: int | None) -> Record:
    key = _key(GROUP_METADATA, group_id=group_id)
    return key, None if epoch is None else _value(GROUP_METADATA, epoch=epoch, metadata_hash=0)


def assignment_epoch(group_id: str, epoch: int | None, now_ms: int = 0) -> Record:
    key = _key(TARGET_ASSIGNMENT_METADATA, group_id=group_id)
    if epoch is None:
        return key, None
    return key, _value(
        TARGET_ASSIGNMENT_METADATA, assignment_epoch=epoch, assignment_timestamp=now_ms
    )


def target_member(group_id: str, member_id: str, target: Partitions | None) -> Record:
    key = _key(TARGET_ASSIGNMENT_MEMBER, group_id=group_id, member_id=member_id)
    if target is None:
        return key, None
    return key, _value(TARGET_ASSIGNMENT_MEMBER, topic_partitions=_topic_partitions(target))


def current_assignment(
    group_id: str, member_id: str, epochs: tuple[int, int] | None, assigned: Partitions
) -> Record:
    """`epochs`: (member epoch, previous member epoch); None: the member left."""
    key = _key(CURRENT_MEMBER_ASSIGNMENT, group_id=group_id, member_id=member_id)
    if epochs is None:
        return key, None
    return key, _value(
        CURRENT_MEMBER_ASSIGNMENT,
        member_epoch=epochs[0],
        previous_member_epoch=epochs[1],
        state=STABLE_STATE,
        assigned_partitions=_topic_partitions(assigned),
    )


def state_partitions(
    group_id: str, initialized: Mapping[str, tuple[str, tuple[int, ...]]] | None
) -> Record:
    """`initialized`: topic id -> (topic name, partitions) whose share state exists."""
    key = _key(STATE_PARTITION_METADATA, group_id=group_id)
    if initialized is None:
        return key, None
    return key, _value(
        STATE_PARTITION_METADATA,
        initializing_topics=[],
        initialized_topics=[
            {"topic_id": uuid_of(topic_id), "topic_name": name, "partitions": sorted(parts)}
            for topic_id, (name, parts) in sorted(initialized.items())
        ],
        deleting_topics=[],
    )


def partitions_of(entries: Any) -> dict[str, tuple[int, ...]]:
    """Topic id -> partitions of a decoded TopicPartitions array."""
    return {topic_id_of(e.topic_id): tuple(sorted(e.partitions)) for e in entries or []}


__all__ = ["SHARE_GROUP_RECORD_TYPES", "Record", "record_type", "decode_key", "decode_value"]
