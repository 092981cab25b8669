"""`__consumer_offsets` records in Kafka's formats: offset commits (v0-v4, v4 flexible as
Kafka 4.x writes them), group metadata (key type 2, values v0-v4), and the consumer
protocol's subscription and assignment, checked against kafka-python's implementation."""

import struct

import pytest
from kafka.coordinator.assignors.abstract import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from seglog.errors import CorruptRecordError
from services.gateway.groups.offsets_formats import (
    CommittedOffset,
    GroupMetadata,
    MemberMetadata,
    decode_group_key,
    decode_group_value,
    decode_offset_key,
    decode_offset_value,
    encode_assignment,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    encode_subscription,
    key_type,
)


def test_offset_key_and_value_have_kafkas_layout():
    key = encode_offset_key("g", "orders", 3)
    assert key == struct.pack(">h", 1) + b"\x00\x01g" + b"\x00\x06orders" + struct.pack(">i", 3)
    value = encode_offset_value(42, 5, "meta", 1_700_000_000_000)
    assert value == (
        struct.pack(">hqi", 3, 42, 5) + b"\x00\x04meta" + struct.pack(">q", 1_700_000_000_000)
    )
    assert key_type(key) == 1
    assert decode_offset_key(key) == ("g", "orders", 3)
    assert decode_offset_value(value) == CommittedOffset(42, 5, "meta", 1_700_000_000_000)


def test_older_offset_values_are_read():
    v0 = struct.pack(">hq", 0, 7) + b"\x00\x01m" + struct.pack(">q", 100)
    v1 = struct.pack(">hq", 1, 9) + b"\x00\x00" + struct.pack(">qq", 111, 222)
    v2 = struct.pack(">hq", 2, 8) + b"\x00\x00" + struct.pack(">q", 333)
    assert decode_offset_value(v0) == CommittedOffset(7, -1, "m", 100)
    assert decode_offset_value(v1) == CommittedOffset(9, -1, "", 111)
    assert decode_offset_value(v2) == CommittedOffset(8, -1, "", 333)


def test_kafka_4_flexible_offset_values_are_read_with_their_tagged_fields():
    # v4: compact string (length + 1 as an unsigned varint), then tagged fields, here one
    # unknown tag (a later Kafka's addition) that must be skipped.
    v4 = (
        struct.pack(">hqi", 4, 1234, 17)
        + bytes([5])
        + b"meta"
        + struct.pack(">q", 1_700_000_000_123)
        + bytes([1, 3, 2])
        + b"\xab\xcd"
    )
    assert decode_offset_value(v4) == CommittedOffset(1234, 17, "meta", 1_700_000_000_123)
    with pytest.raises(CorruptRecordError, match="version 5"):
        decode_offset_value(struct.pack(">hq", 5, 0))


def test_group_metadata_is_written_as_kafkas_v3_and_read_back():
    members = (
        MemberMetadata(
            "m-1",
            "client-a",
            "/127.0.0.1",
            30_000,
            10_000,
            encode_subscription(["orders", "payments"]),
            encode_assignment({"orders": [0, 2], "payments": [1]}),
        ),
    )
    group = GroupMetadata("consumer", 7, "range", "m-1", 1_700_000_000_000, members)
    key = encode_group_key("g")
    assert key == struct.pack(">h", 2) + b"\x00\x01g"
    assert key_type(key) == 2 and decode_group_key(key) == "g"
    value = encode_group_value(group)
    assert value[:2] == struct.pack(">h", 3)
    assert decode_group_value(value) == group
    empty = GroupMetadata("consumer", 8, None, None, 1_700_000_001_000, ())
    assert decode_group_value(encode_group_value(empty)) == empty


def test_flexible_group_metadata_v4_is_read():
    def compact(text):
        return bytes([len(text) + 1]) + text.encode()

    v4 = (
        struct.pack(">h", 4)
        + compact("consumer")
        + struct.pack(">i", 3)
        + compact("range")
        + compact("m")
        + struct.pack(">q", 99)
        + bytes([2])  # one member
        + compact("m")
        + bytes([0])  # null group instance id
        + compact("c")
        + compact("h")
        + struct.pack(">ii", 1000, 2000)
        + bytes([3])
        + b"sb"
        + bytes([1])  # empty assignment
        + bytes([0])  # member tagged fields
        + bytes([0])  # value tagged fields
    )
    decoded = decode_group_value(v4)
    assert (decoded.generation, decoded.protocol, decoded.leader) == (3, "range", "m")
    assert decoded.members == (MemberMetadata("m", "c", "h", 1000, 2000, b"sb", b"", None),)


def test_consumer_protocol_subscription_and_assignment_match_kafka_python():
    theirs = ConsumerProtocolSubscription(version=0, topics=["a", "b"], user_data=None)
    assert encode_subscription(["a", "b"]) == bytes(theirs.encode(version=0))
    tp = ConsumerProtocolAssignment.TopicPartition
    theirs_assignment = ConsumerProtocolAssignment(
        version=0,
        assigned_partitions=[tp(topic="a", partitions=[0, 2]), tp(topic="b", partitions=[1])],
        user_data=None,
    )
    assert encode_assignment({"b": [1], "a": [0, 2]}) == bytes(theirs_assignment.encode(version=0))
