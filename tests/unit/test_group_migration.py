"""Online migration's conversions on the coordinator's own types: a classic group becomes a
consumer group at its generation with its members' last assignments, a consumer group of
classic members becomes a classic group handing out its target assignment, the migration
policy allows each way or not, and a classic member's metadata survives its records."""

from __future__ import annotations

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from services.gateway.groups import consumer_group_records as records
from services.gateway.groups.consumer_group_replay import diff_records, replay
from services.gateway.groups.consumer_group_state import (
    STABLE,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
)
from services.gateway.groups.group_migration import (
    BIDIRECTIONAL,
    DISABLED,
    DOWNGRADE,
    UPGRADE,
    can_upgrade,
    classic_group_from_consumer,
    consumer_group_from_classic,
    downgrade_enabled,
)
from services.gateway.groups.group_state import CLASSIC, Group, Member
from services.gateway.groups.offsets_formats import encode_assignment, encode_subscription

T = "AAAAAAAAAAAAAAAAAAAAAQ"  # topic "t"'s id in the registry's form
IDS = {"t": T}
NAMES = {T: "t"}


def classic_group(generation: int = 7) -> Group:
    group = Group("g", state="Stable", generation=generation, kind=CLASSIC, strategy="range")
    group.protocol_type = "consumer"
    for member_id, partitions in (("a", [0, 1]), ("b", [2])):
        member = Member(member_id, "client", "/host", ("t",), ("range",), 10.0, 30.0, 0.0)
        member.protocols = (("range", encode_subscription(["t"])),)
        member.assignment_bytes = encode_assignment({"t": partitions})
        group.members[member_id] = member
    return group


def test_a_classic_group_becomes_a_consumer_group_at_its_generation():
    converted = consumer_group_from_classic(classic_group(), IDS.get, now=5.0)
    assert (converted.epoch, converted.assignment_epoch) == (7, 7)
    a, b = converted.members["a"], converted.members["b"]
    assert (a.member_epoch, a.state, a.topics) == (7, STABLE, ("t",))
    assert a.assigned == converted.target["a"] == {T: frozenset({0, 1})}
    assert b.assigned == {T: frozenset({2})}
    assert a.classic == ClassicMetadata(10_000, (("range", encode_subscription(["t"])),))
    assert a.rebalance_timeout_ms == 30_000


def test_a_group_of_classic_members_becomes_a_classic_group_with_its_target():
    group = ConsumerGroup("g", epoch=9, assignment_epoch=9)
    for member_id, partitions in (("a", {0}), ("b", {1, 2}), ("leaving", set())):
        classic = None if member_id == "leaving" else ClassicMetadata(10_000, (("range", b""),))
        group.members[member_id] = ConsumerMember(member_id, topics=("t",), classic=classic)
        group.target[member_id] = {T: frozenset(partitions)}
    converted = classic_group_from_consumer(group, "leaving", NAMES.get, now=1.0)
    assert (converted.kind, converted.generation, converted.strategy) == (CLASSIC, 9, "range")
    assert set(converted.members) == {"a", "b"} and converted.leader == "a"
    handed = ConsumerProtocolAssignment.decode(converted.members["b"].assignment_bytes)
    assert [(x.topic, sorted(x.partitions)) for x in handed.assigned_partitions] == [("t", [1, 2])]
    assert converted.members["a"].session_timeout_s == 10.0


def test_the_policy_allows_each_conversion_or_not():
    group = classic_group()
    assert [can_upgrade(group, p, 10) for p in (DISABLED, UPGRADE, DOWNGRADE, BIDIRECTIONAL)] == [
        False,
        True,
        False,
        True,
    ]
    assert not can_upgrade(group, BIDIRECTIONAL, 1)  # bigger than a consumer group may be
    group.protocol_type = "connect"
    assert not can_upgrade(group, BIDIRECTIONAL, 10)  # not the consumer protocol
    assert [downgrade_enabled(p) for p in (DISABLED, UPGRADE, DOWNGRADE, BIDIRECTIONAL)] == [
        False,
        False,
        True,
        True,
    ]


def test_a_classic_members_metadata_survives_its_records():
    group = consumer_group_from_classic(classic_group(), IDS.get, now=0.0)
    written = diff_records(ConsumerGroup("g"), group)
    stored = dict(written)
    assert any(records.record_type(k) == records.MEMBER_METADATA for k in stored)
    back = replay("g", {k: v for k, v in stored.items() if v is not None}, now=0.0)
    assert back is not None
    assert back.members["a"].classic == group.members["a"].classic
    assert back.members["b"].assigned == {T: frozenset({2})}
