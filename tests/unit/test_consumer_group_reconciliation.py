"""KIP-848 reconciliation and the server-side assignors, on the coordinator's own types: a
partition reaches its new owner only after its old owner released it; uniform is balanced
and sticky; range gives contiguous, co-partitioned ranges; records round-trip through
Kafka's schemas."""

from __future__ import annotations

from services.gateway.groups import consumer_group_records as records
from services.gateway.groups.consumer_group_replay import diff_records, replay
from services.gateway.groups.consumer_group_state import (
    STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerMember,
    reconcile,
)
from services.gateway.groups.server_assignors import (
    RANGE,
    UNIFORM,
    AssignorMember,
    assign,
    preferred,
)

T = "AAAAAAAAAAAAAAAAAAAAAQ"  # a topic id in the registry's form
U = "AAAAAAAAAAAAAAAAAAAAAg"


def test_a_partition_moves_only_after_its_owner_revoked_it():
    group = ConsumerGroup("g", epoch=1, assignment_epoch=1)
    a = group.members["a"] = ConsumerMember("a")
    group.target = {"a": {T: frozenset({0, 1})}}
    reconcile(group, a, {}, 0.0)
    assert (a.member_epoch, a.state, a.assigned) == (1, STABLE, {T: frozenset({0, 1})})
    # b joins: the target gives it partition 1, which a still owns.
    b = group.members["b"] = ConsumerMember("b")
    group.epoch = group.assignment_epoch = 2
    group.target = {"a": {T: frozenset({0})}, "b": {T: frozenset({1})}}
    reconcile(group, b, {}, 0.0)
    assert (b.member_epoch, b.state, b.assigned) == (2, UNRELEASED_PARTITIONS, {})
    reconcile(group, a, {T: frozenset({0, 1})}, 0.0)
    assert (a.member_epoch, a.state) == (1, UNREVOKED_PARTITIONS)
    assert a.pending_revocation == {T: frozenset({1})}
    reconcile(group, b, None, 0.0)
    assert b.assigned == {}  # still held by a, pending its revocation
    reconcile(group, a, {T: frozenset({0, 1})}, 0.0)  # not revoked yet: a waits
    assert a.state == UNREVOKED_PARTITIONS
    reconcile(group, a, {T: frozenset({0})}, 0.0)  # a released partition 1
    assert (a.member_epoch, a.state, a.assigned) == (2, STABLE, {T: frozenset({0})})
    reconcile(group, b, None, 0.0)
    assert (b.state, b.assigned) == (STABLE, {T: frozenset({1})})


def test_uniform_is_balanced_and_sticky():
    members = [AssignorMember(m, None, frozenset({T, U}), frozenset()) for m in "abc"]
    first = assign(UNIFORM, members, {T: 4, U: 3})
    assert sorted(len(p) for p in first.values()) == [2, 2, 3]
    assert set().union(*first.values()) == {(T, p) for p in range(4)} | {(U, p) for p in range(3)}
    # d joins: the others keep what they had, up to their share.
    grown = [AssignorMember(m.member_id, None, m.topic_ids, first[m.member_id]) for m in members]
    grown.append(AssignorMember("d", None, frozenset({T, U}), frozenset()))
    second = assign(UNIFORM, grown, {T: 4, U: 3})
    assert sorted(len(p) for p in second.values()) == [1, 2, 2, 2]
    moved = sum(len(first[m] - second[m]) for m in first)
    assert moved == len(second["d"])  # only what d took moved


def test_uniform_with_different_subscriptions_assigns_each_topic_to_its_readers():
    members = [
        AssignorMember("a", None, frozenset({T}), frozenset()),
        AssignorMember("b", None, frozenset({T, U}), frozenset()),
    ]
    answer = assign(UNIFORM, members, {T: 2, U: 2})
    assert all(t == T for t, _ in answer["a"])
    assert (
        len(answer["a"]) + len(answer["b"]) == 4 and abs(len(answer["a"]) - len(answer["b"])) <= 1
    )


def test_range_gives_contiguous_co_partitioned_ranges():
    members = [AssignorMember(m, None, frozenset({T, U}), frozenset()) for m in ("m0", "m1")]
    answer = assign(RANGE, members, {T: 3, U: 3})
    assert answer["m0"] == {(T, 0), (T, 1), (U, 0), (U, 1)}
    assert answer["m1"] == {(T, 2), (U, 2)}
    assert preferred([None, "range", "range", "uniform"]) == RANGE
    assert preferred([None]) == UNIFORM


def test_records_round_trip_through_kafkas_schemas():
    before = ConsumerGroup("g")
    after = ConsumerGroup("g", epoch=3, assignment_epoch=3)
    member = after.members["m"] = ConsumerMember(
        "m", client_id="c", client_host="/h", instance_id="i", topics=("t",), regex=None,
        server_assignor="range", member_epoch=3, previous_member_epoch=2,
        assigned={T: frozenset({0, 2})}, pending_revocation={U: frozenset({1})},
        state=UNREVOKED_PARTITIONS,
    )  # fmt: skip
    after.target = {"m": {T: frozenset({0, 2})}}
    written = diff_records(before, after)
    kinds = [records.record_type(k) for k, _ in written]
    assert kinds == [5, 3, 7, 6, 8]  # Kafka's order for a joining member
    stored = dict(written)
    back = replay("g", stored, 0.0)
    assert back is not None
    assert (back.epoch, back.assignment_epoch, back.static_members) == (3, 3, {"i": "m"})
    got = back.members["m"]
    assert (got.member_epoch, got.previous_member_epoch, got.state) == (3, 2, member.state)
    assert (got.assigned, got.pending_revocation) == (member.assigned, member.pending_revocation)
    assert back.target == after.target
    # Leaving: tombstones of the member's records, then the new epoch.
    gone = ConsumerGroup("g", epoch=4, assignment_epoch=3)
    tombstones = diff_records(after, gone)
    assert [(records.record_type(k), v) for k, v in tombstones[:3]] == [
        (8, None),
        (7, None),
        (5, None),
    ]
    assert records.record_type(tombstones[3][0]) == 3
