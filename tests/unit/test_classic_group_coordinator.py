"""Kafka's classic group protocol on the coordinator (services/gateway/groups/
classic_protocol.py), driven by direct calls as Kafka's GroupCoordinatorTest drives its own:
JoinGroup (MEMBER_ID_REQUIRED, a leader answered with every member's metadata), SyncGroup (the
leader's assignment handed to followers that wait for it), heartbeats, leaves, static
members, sessions, and the refusal to mix with seglog-managed members. Calls that wait for
another member run in a thread of their own; nothing sleeps, every wait has a deadline."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from seglog.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from services.gateway.groups.consumer_protocol import assignment_partitions, subscription_topics
from services.gateway.groups.coordinator import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
)
from services.gateway.groups.offsets_formats import GroupMetadata, MemberMetadata
from tests.waiting import wait_until

GROUP = "classic-readers"
SESSION_TIMEOUT_MS = 10_000
# Long enough never to pass while a test runs, so only the members' calls complete a step.
LONG_REBALANCE_TIMEOUT_MS = 120_000
CALL_TIMEOUT_S = 30


def subscription(*topics: str) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=list(topics)).encode())


def assignment(topic: str, partitions: list[int]) -> bytes:
    entry = ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=partitions)
    return bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=[entry]).encode())


RANGE = (("range", subscription("events")),)


def join(
    coordinator,
    member_id="",
    *,
    protocols=RANGE,
    instance=None,
    protocol_type="consumer",
    session_timeout_ms=SESSION_TIMEOUT_MS,
    rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS,
    require_known_member_id=False,
):
    return coordinator.classic.join_classic(
        GROUP,
        member_id,
        group_instance_id=instance,
        client_id="kafka-reader",
        client_host="127.0.0.1",
        protocol_type=protocol_type,
        protocols=protocols,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        require_known_member_id=require_known_member_id,
    )


def sync(coordinator, joined, assignments=None, *, instance=None, member_id=None):
    """The member's assignment bytes."""
    protocol_type, protocol, given = coordinator.classic.sync_group(
        GROUP,
        member_id or joined.member_id,
        joined.generation,
        group_instance_id=instance,
        protocol_type="consumer",
        protocol=joined.protocol,
        assignments=assignments or {},
    )
    assert (protocol_type, protocol) == ("consumer", joined.protocol)
    return given


def state_of(coordinator):
    group = coordinator.snapshot(GROUP)
    return None if group is None else group.state


def stable_pair(coordinator, pool, *, first_instance=None, second_instance=None):
    """Two members in a Stable generation: the first is the leader and gives partitions
    0-1 to itself and 2-3 to the second."""
    first = join(coordinator, instance=first_instance)
    assert sync(coordinator, first, {first.member_id: assignment("events", [0, 1, 2, 3])})
    second_join = pool.submit(join, coordinator, instance=second_instance)
    assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
    first = join(coordinator, first.member_id, instance=first_instance)
    second = second_join.result(timeout=CALL_TIMEOUT_S)
    follower_sync = pool.submit(sync, coordinator, second, instance=second_instance)
    assert wait_until(lambda: second.member_id not in coordinator.snapshot(GROUP).pending_sync)
    plan = {
        first.member_id: assignment("events", [0, 1]),
        second.member_id: assignment("events", [2, 3]),
    }
    assert sync(coordinator, first, plan, instance=first_instance) == plan[first.member_id]
    assert follower_sync.result(timeout=CALL_TIMEOUT_S) == plan[second.member_id]
    return first, second


# -- join and sync -----------------------------------------------------------------------------


def test_a_new_member_of_join_v4_is_given_an_id_to_join_again_with(coordinator):
    with pytest.raises(MemberIdRequiredError) as required:
        join(coordinator, require_known_member_id=True)
    member_id = required.value.member_id
    assert member_id.startswith("kafka-reader-")
    assert coordinator.snapshot(GROUP).members == {}
    joined = join(coordinator, member_id, require_known_member_id=True)
    assert (joined.member_id, joined.leader, joined.generation) == (member_id, member_id, 1)
    assert (joined.protocol_type, joined.protocol) == ("consumer", "range")
    # The leader is answered with every member's metadata for the chosen protocol.
    assert joined.members == ((member_id, None, subscription("events")),)
    assert state_of(coordinator) == COMPLETING_REBALANCE
    assert coordinator.snapshot(GROUP).members[member_id].topics == ("events",)


def test_a_join_with_an_id_the_group_never_gave_is_refused(coordinator):
    with pytest.raises(UnknownMemberIdError):
        join(coordinator, "kafka-reader-never-joined")


def test_followers_sync_waits_for_the_leaders_assignment(coordinator):
    with ThreadPoolExecutor(2) as pool:
        first, second = stable_pair(coordinator, pool)
    assert first.generation == second.generation == 2
    assert first.leader == second.leader == first.member_id
    assert len(first.members) == 2 and second.members == ()
    group = coordinator.snapshot(GROUP)
    assert group.state == STABLE
    assert assignment_partitions(group.members[second.member_id].assignment_bytes) == {
        "events": [2, 3]
    }
    # A sync of the Stable generation is answered at once with the member's bytes.
    assert sync(coordinator, second) == assignment("events", [2, 3])
    with pytest.raises(IllegalGenerationError):
        coordinator.classic.sync_group(
            GROUP,
            second.member_id,
            second.generation - 1,
            group_instance_id=None,
            protocol_type=None,
            protocol=None,
            assignments={},
        )


def test_the_protocol_most_members_prefer_among_those_all_support_is_chosen(coordinator):
    sticky_first = (("sticky", b"s"), ("range", b"r"), ("roundrobin", b"rr"))
    with ThreadPoolExecutor(2) as pool:
        first = join(coordinator, protocols=sticky_first)
        sync(coordinator, first)
        # Neither "sticky" (the first's choice, the second lacks it) nor "range" wins: two of
        # the three members list roundrobin first.
        second = pool.submit(join, coordinator, protocols=(("roundrobin", b""), ("range", b"")))
        assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
        third = pool.submit(join, coordinator, protocols=(("roundrobin", b""), ("range", b"")))
        assert wait_until(lambda: len(coordinator.snapshot(GROUP).members) == 3)
        again = join(coordinator, first.member_id, protocols=sticky_first)
        answers = [again, second.result(CALL_TIMEOUT_S), third.result(CALL_TIMEOUT_S)]
    assert {a.protocol for a in answers} == {"roundrobin"}
    leader = next(a for a in answers if a.members)
    assert dict((m, data) for m, _, data in leader.members)[again.member_id] == b"rr"
    with pytest.raises(InconsistentGroupProtocolError):
        join(coordinator, protocols=(("sticky", b""),))


def test_a_follower_joining_a_stable_group_unchanged_gets_the_generation_again(coordinator):
    with ThreadPoolExecutor(2) as pool:
        first, second = stable_pair(coordinator, pool)
    again = join(coordinator, second.member_id)
    assert (again.generation, again.leader, again.members) == (2, first.member_id, ())
    assert state_of(coordinator) == STABLE


# -- heartbeats, leaving, sessions ---------------------------------------------------------


def test_heartbeats_pass_while_the_leader_assigns_and_stop_at_a_rebalance(coordinator):
    joined = join(coordinator)
    coordinator.heartbeat(GROUP, joined.member_id, joined.generation)  # CompletingRebalance
    with pytest.raises(RebalanceInProgressError):  # commits wait for the assignment
        coordinator.check_commit(GROUP, joined.member_id, joined.generation)
    sync(coordinator, joined)
    coordinator.check_commit(GROUP, joined.member_id, joined.generation)
    with pytest.raises(UnknownMemberIdError):  # the group has members: no simple commit
        coordinator.check_commit(GROUP, "", -1)
    with ThreadPoolExecutor(1) as pool:
        pool.submit(join, coordinator)
        assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
        with pytest.raises(RebalanceInProgressError):
            coordinator.heartbeat(GROUP, joined.member_id, joined.generation)
        coordinator.classic.leave_members(GROUP, [(joined.member_id, None)])


def test_losing_the_leader_mid_sync_sends_the_waiting_follower_back_to_join(coordinator):
    with ThreadPoolExecutor(2) as pool:
        first, second = stable_pair(coordinator, pool)
        third = pool.submit(join, coordinator)
        assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
        first = pool.submit(join, coordinator, first.member_id)
        second = join(coordinator, second.member_id)
        leader, third = first.result(CALL_TIMEOUT_S), third.result(CALL_TIMEOUT_S)
        waiting = pool.submit(sync, coordinator, second)
        assert wait_until(lambda: second.member_id not in coordinator.snapshot(GROUP).pending_sync)
        # The leader goes away before its SyncGroup.
        assert coordinator.classic.leave_members(GROUP, [(leader.member_id, None)]) == [None]
        with pytest.raises(RebalanceInProgressError):
            waiting.result(CALL_TIMEOUT_S)
        rejoined = pool.submit(join, coordinator, third.member_id)
        again = join(coordinator, second.member_id)
        other = rejoined.result(CALL_TIMEOUT_S)
    assert again.generation == other.generation == leader.generation + 1
    assert again.leader in (second.member_id, third.member_id)
    assert again.leader != leader.member_id


def test_a_member_that_stops_heartbeating_is_removed_at_its_session_timeout(make_coordinator):
    coordinator = make_coordinator(min_session_timeout_ms=1)
    joined = join(coordinator, session_timeout_ms=1)
    sync(coordinator, joined)
    assert wait_until(lambda: coordinator.snapshot(GROUP).members == {})
    group = coordinator.snapshot(GROUP)
    assert (group.state, group.generation, group.leader) == (EMPTY, joined.generation + 1, "")


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout(coordinator):
    with ThreadPoolExecutor(2) as pool:
        first = join(coordinator)
        sync(coordinator, first)
        second = pool.submit(join, coordinator, rebalance_timeout_ms=0)
        assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
        leader = join(coordinator, first.member_id, rebalance_timeout_ms=0)
        follower = second.result(CALL_TIMEOUT_S)
        # Both send nothing more: neither synced within the rebalance timeout.
        assert wait_until(lambda: coordinator.snapshot(GROUP).members == {})
    with pytest.raises(UnknownMemberIdError):
        coordinator.heartbeat(GROUP, follower.member_id, leader.generation)


def test_leaving_in_a_batch_names_members_by_id_or_by_instance(coordinator):
    with ThreadPoolExecutor(2) as pool:
        first, second = stable_pair(coordinator, pool, second_instance="reader-b")
    outcomes = coordinator.classic.leave_members(
        GROUP,
        [("kafka-reader-never-joined", None), ("wrong-id", "reader-b"), ("", "reader-b")],
    )
    assert isinstance(outcomes[0], UnknownMemberIdError)
    assert isinstance(outcomes[1], FencedInstanceIdError)
    assert outcomes[2] is None
    assert list(coordinator.snapshot(GROUP).members) == [first.member_id]
    assert state_of(coordinator) == PREPARING_REBALANCE


# -- static membership -----------------------------------------------------------------------


def test_a_static_member_back_with_the_same_protocols_replaces_its_old_id_without_a_rebalance(
    coordinator,
):
    with ThreadPoolExecutor(2) as pool:
        first, second = stable_pair(coordinator, pool, first_instance="reader-a")
    # The leader restarts: it joins without a member id, under its instance id.
    back = join(coordinator, instance="reader-a")
    assert back.member_id != first.member_id
    assert back.generation == first.generation
    # The old leader id is answered, so the restarted member does not assign again.
    assert (back.leader, back.members) == (first.member_id, ())
    assert state_of(coordinator) == STABLE
    assert sync(coordinator, back, instance="reader-a") == assignment("events", [0, 1])
    coordinator.heartbeat(GROUP, second.member_id, second.generation)  # no rebalance
    with pytest.raises(FencedInstanceIdError):
        coordinator.heartbeat(GROUP, first.member_id, first.generation, "reader-a")
    with pytest.raises(FencedInstanceIdError):
        join(coordinator, first.member_id, instance="reader-a")
    assert coordinator.snapshot(GROUP).leader == back.member_id


def test_a_static_member_back_with_another_protocol_starts_a_rebalance(coordinator):
    joined = join(coordinator, instance="reader-a")
    sync(coordinator, joined, instance="reader-a")
    # Range stays common to the group's members, so the join is allowed; the group's
    # choice changes to the member's first.
    back = join(coordinator, instance="reader-a", protocols=(("roundrobin", b""), ("range", b"")))
    assert (back.generation, back.protocol) == (joined.generation + 1, "roundrobin")
    assert back.leader == back.member_id


# -- one kind of member per group, and what is stored ----------------------------------------


def test_classic_and_seglog_managed_members_do_not_share_a_group(coordinator):
    joined = join(coordinator)
    with pytest.raises(InconsistentGroupProtocolError):
        coordinator.managed.join(
            GROUP,
            "",
            client_id="seglog",
            client_host="127.0.0.1",
            topics=("events",),
            strategies=("range",),
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=0,
        )
    with pytest.raises(InconsistentGroupProtocolError):
        join(coordinator, protocol_type="connect")
    coordinator.classic.leave_members(GROUP, [(joined.member_id, None)])
    managed = coordinator.managed.join(
        GROUP,
        "",
        client_id="seglog",
        client_host="127.0.0.1",
        topics=("events",),
        strategies=("range",),
        session_timeout_ms=SESSION_TIMEOUT_MS,
        rebalance_timeout_ms=0,
    )
    assert managed.assignment == {"events": [0, 1, 2, 3]}
    with pytest.raises(InconsistentGroupProtocolError):
        join(coordinator)


def test_the_stored_record_of_a_classic_group_carries_its_protocol_leader_and_bytes(
    make_coordinator,
):
    written = []
    coordinator = make_coordinator(persist=lambda *stored: written.append(stored))
    joined = join(coordinator, instance="reader-a")
    given = assignment("events", [0, 1, 2, 3])
    sync(coordinator, joined, {joined.member_id: given}, instance="reader-a")
    assert coordinator.wait_persisted(CALL_TIMEOUT_S)
    group_id, record = written[-1]
    assert group_id == GROUP
    assert (record.protocol_type, record.protocol, record.leader) == (
        "consumer",
        "range",
        joined.member_id,
    )
    (member,) = record.members
    assert (member.member_id, member.group_instance_id) == (joined.member_id, "reader-a")
    assert (member.subscription, member.assignment) == (subscription("events"), given)
    assert (member.session_timeout_ms, member.rebalance_timeout_ms) == (
        SESSION_TIMEOUT_MS,
        LONG_REBALANCE_TIMEOUT_MS,
    )


def test_consumer_protocol_bytes_that_do_not_decode_describe_as_nothing():
    # The bytes are the clients': a layout of their own is shown empty, never refused.
    assert subscription_topics(b"\x00") == ()
    assert assignment_partitions(b"\x00\x00\x00\x00\x00\x09") == {}
    assert subscription_topics(subscription("events", "orders")) == ("events", "orders")
    assert assignment_partitions(assignment("events", [2, 3])) == {"events": [2, 3]}


# -- a coordinator that loads a group keeps its static members -------------------------------


def stored_group(*members, generation=5, leader="reader-a-old"):
    return GroupMetadata("consumer", generation, "range", leader, 0, tuple(members))


def stored_member(member_id, instance, partitions):
    return MemberMetadata(
        member_id,
        "kafka-reader",
        "/127.0.0.1",
        LONG_REBALANCE_TIMEOUT_MS,
        SESSION_TIMEOUT_MS,
        subscription("events"),
        assignment("events", partitions),
        instance,
    )


def test_a_loaded_groups_static_member_takes_its_place_back_without_a_rebalance(
    make_coordinator,
):
    record = stored_group(
        stored_member("reader-a-old", "reader-a", [0, 1]),
        stored_member("reader-b-old", "reader-b", [2, 3]),
    )
    coordinator = make_coordinator(load=lambda group_id: record if group_id == GROUP else None)
    # A member that kept its id heartbeats on (the group is loaded for it)...
    coordinator.heartbeat(GROUP, "reader-b-old", 5, "reader-b")
    # ...and one that restarted joins under its instance id: same generation, its partitions.
    back = join(coordinator, instance="reader-a")
    assert (back.generation, back.leader, back.members) == (5, "reader-a-old", ())
    assert sync(coordinator, back, instance="reader-a") == assignment("events", [0, 1])
    group = coordinator.snapshot(GROUP)
    assert (group.state, group.generation, group.leader) == (STABLE, 5, back.member_id)
    assert group.members["reader-b-old"].topics == ("events",)
    with pytest.raises(UnknownMemberIdError):  # a dynamic member of the record is not kept
        coordinator.heartbeat(GROUP, "reader-dynamic", 5)


def test_a_loaded_group_that_had_dynamic_members_rebalances_its_static_ones(make_coordinator):
    record = stored_group(
        stored_member("reader-a-old", "reader-a", [0, 1]),
        stored_member("reader-dynamic", None, [2, 3]),
    )
    coordinator = make_coordinator(load=lambda group_id: record if group_id == GROUP else None)
    back = join(coordinator, instance="reader-a")
    assert back.generation == 6 and back.leader == back.member_id
    assert list(coordinator.snapshot(GROUP).members) == [back.member_id]
