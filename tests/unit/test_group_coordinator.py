"""The consumer group state machine (services/gateway/groups/coordinator.py), driven by
direct calls as Kafka's GroupCoordinatorTest drives its own: joins, heartbeats, leaves and
commits in, generations, states, assignments and errors out. The registry is a real one on a
temporary directory (the coordinator reads only its topics' partition counts). A JoinGroup
waits for the rebalance to complete, so a join that must wait for another member runs in a
thread of its own; nothing sleeps, every wait has a deadline."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from seglog.errors import (
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from services.gateway.groups.coordinator import (
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
)
from services.gateway.groups.offsets_formats import CONSUMER_PROTOCOL_TYPE, GroupMetadata
from tests.waiting import wait_until

GROUP = "readers"
SESSION_TIMEOUT_MS = 10_000
# Long enough never to pass while a test runs, so only the members' joins complete it.
LONG_REBALANCE_TIMEOUT_MS = 120_000
JOIN_TIMEOUT_S = 30


def join(
    coordinator,
    member_id="",
    *,
    strategies=("range",),
    rebalance_timeout_ms=0,
    session_timeout_ms=SESSION_TIMEOUT_MS,
    topics=("events",),
    group_id=GROUP,
):
    return coordinator.managed.join(
        group_id,
        member_id,
        client_id="reader",
        client_host="127.0.0.1",
        topics=topics,
        strategies=strategies,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
    )


def state_of(coordinator, group_id=GROUP):
    group = coordinator.snapshot(group_id)
    return None if group is None else group.state


# -- joining ---------------------------------------------------------------------------------


def test_the_first_member_gets_generation_one_and_every_partition(coordinator):
    joined = join(coordinator)
    assert joined.generation == 1
    assert joined.member_id.startswith("reader-")
    assert joined.strategy == "range"
    assert joined.assignment == {"events": [0, 1, 2, 3]}
    assert state_of(coordinator) == STABLE


def test_joining_with_an_id_the_group_does_not_know_is_refused(coordinator):
    with pytest.raises(UnknownMemberIdError):
        join(coordinator, "reader-never-joined")


@pytest.mark.parametrize(
    ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "error"),
    [
        ("", SESSION_TIMEOUT_MS, 0, InvalidGroupIdError),
        (GROUP, 5_999, 0, InvalidSessionTimeoutError),
        (GROUP, 1_800_001, 0, InvalidSessionTimeoutError),
        (GROUP, SESSION_TIMEOUT_MS, -1, InvalidRequestError),
    ],
    ids=["empty-group-id", "session-below-min", "session-above-max", "negative-rebalance"],
)
def test_joins_outside_the_coordinators_limits_are_refused(
    coordinator, group_id, session_timeout_ms, rebalance_timeout_ms, error
):
    with pytest.raises(error):
        join(
            coordinator,
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
        )
    assert coordinator.group_ids() == []


def test_a_member_must_offer_a_strategy_the_coordinator_and_the_group_support(coordinator):
    with pytest.raises(InconsistentGroupProtocolError):
        join(coordinator, strategies=("sticky-of-our-own",))
    join(coordinator, strategies=("range",))
    with pytest.raises(InconsistentGroupProtocolError):
        join(coordinator, strategies=("roundrobin",))


def test_a_rejoin_of_every_member_completes_the_rebalance_with_the_first_members_strategy(
    coordinator,
):
    first = join(
        coordinator,
        strategies=("roundrobin", "range"),
        rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS,
    )
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(
            join,
            coordinator,
            strategies=("range", "roundrobin"),
            rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS,
        )
        assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
        # The first member learns of the rebalance from its heartbeat and joins again.
        with pytest.raises(RebalanceInProgressError):
            coordinator.heartbeat(GROUP, first.member_id, first.generation)
        again = join(
            coordinator,
            first.member_id,
            strategies=("roundrobin", "range"),
            rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS,
        )
        joined = second.result(timeout=JOIN_TIMEOUT_S)
    assert again.generation == joined.generation == 2
    assert again.strategy == joined.strategy == "roundrobin"  # the first member's first choice
    assert again.member_count == joined.member_count == 2
    owned = sorted(again.assignment["events"] + joined.assignment["events"])
    assert owned == [0, 1, 2, 3]
    assert len(again.assignment["events"]) == len(joined.assignment["events"]) == 2


def test_members_that_do_not_join_again_within_the_rebalance_timeout_are_removed(coordinator):
    # Every member's rebalance timeout is 0: the rebalance the second join starts is over at
    # once, and the first member, which did not join again, is out of the next generation.
    first = join(coordinator)
    second = join(coordinator)
    assert second.generation == 2
    assert second.member_count == 1
    assert second.assignment == {"events": [0, 1, 2, 3]}
    with pytest.raises(UnknownMemberIdError):
        coordinator.heartbeat(GROUP, first.member_id, first.generation)


def test_the_first_rebalance_waits_out_the_initial_delay_so_members_land_together(
    make_coordinator,
):
    # Kafka's group.initial.rebalance.delay.ms: both members join generation 1, not one
    # generation each. The delay is real time; the second join only has to start within it.
    coordinator = make_coordinator(initial_rebalance_delay_ms=2_000)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(join, coordinator, rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS)
        assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
        second = join(coordinator, rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS)
        joined = first.result(timeout=JOIN_TIMEOUT_S)
    assert joined.generation == second.generation == 1
    assert joined.member_count == second.member_count == 2


def test_a_coordinator_continues_the_generations_of_the_groups_stored_record(make_coordinator):
    stored = GroupMetadata(CONSUMER_PROTOCOL_TYPE, 7, "range", "reader-old", 0, ())
    coordinator = make_coordinator(load=lambda group_id: stored if group_id == GROUP else None)
    assert join(coordinator).generation == 8
    assert join(coordinator, group_id="other").generation == 1


def test_every_completed_rebalance_and_emptied_group_writes_the_groups_record(
    make_coordinator,
):
    written: list[tuple[str, GroupMetadata]] = []
    coordinator = make_coordinator(persist=lambda *stored: written.append(stored))
    joined = join(coordinator)
    # The writer keeps only a group's latest record while one is being written: wait for
    # the first before making the second.
    assert coordinator.wait_persisted(JOIN_TIMEOUT_S)
    group_id, stable = written[-1]
    assert (group_id, stable.generation, stable.protocol) == (GROUP, 1, "range")
    assert [m.member_id for m in stable.members] == [joined.member_id]
    coordinator.leave(GROUP, joined.member_id)
    assert coordinator.wait_persisted(JOIN_TIMEOUT_S)
    group_id, emptied = written[-1]
    assert (group_id, emptied.generation, emptied.members) == (GROUP, 2, ())


# -- heartbeats, leaving, sessions ---------------------------------------------------------


def test_a_heartbeat_from_an_old_generation_or_an_unknown_member_is_refused(coordinator):
    joined = join(coordinator)
    coordinator.heartbeat(GROUP, joined.member_id, joined.generation)
    with pytest.raises(IllegalGenerationError):
        coordinator.heartbeat(GROUP, joined.member_id, joined.generation - 1)
    with pytest.raises(UnknownMemberIdError):
        coordinator.heartbeat(GROUP, "reader-never-joined", joined.generation)


def test_the_last_member_leaving_empties_the_group_in_a_new_generation(coordinator):
    joined = join(coordinator)
    coordinator.leave(GROUP, joined.member_id)
    group = coordinator.snapshot(GROUP)
    assert (group.state, group.generation, group.members) == (EMPTY, 2, {})
    with pytest.raises(UnknownMemberIdError):
        coordinator.leave(GROUP, joined.member_id)


def test_a_member_leaving_a_stable_group_starts_a_rebalance_for_the_others(coordinator):
    first = join(coordinator, rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS)
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(join, coordinator, rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS)
        assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
        join(coordinator, first.member_id, rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS)
        joined = second.result(timeout=JOIN_TIMEOUT_S)
    coordinator.leave(GROUP, first.member_id)
    assert state_of(coordinator) == PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        coordinator.heartbeat(GROUP, joined.member_id, joined.generation)
    again = join(coordinator, joined.member_id, rebalance_timeout_ms=LONG_REBALANCE_TIMEOUT_MS)
    assert (again.generation, again.member_count) == (3, 1)
    assert again.assignment == {"events": [0, 1, 2, 3]}


def test_a_member_whose_session_expires_is_removed(make_coordinator):
    coordinator = make_coordinator(min_session_timeout_ms=1)
    joined = join(coordinator, session_timeout_ms=1)
    # The coordinator's own reaper removes it; the test only waits for the outcome.
    assert wait_until(lambda: coordinator.snapshot(GROUP).members == {})
    group = coordinator.snapshot(GROUP)
    assert (group.state, group.generation) == (EMPTY, joined.generation + 1)


def test_a_change_in_a_subscribed_topics_partition_count_starts_a_rebalance(coordinator, registry):
    joined = join(coordinator)
    registry.create_partitions("events", 6)
    assert wait_until(lambda: state_of(coordinator) == PREPARING_REBALANCE)
    again = join(coordinator, joined.member_id)
    assert again.assignment == {"events": [0, 1, 2, 3, 4, 5]}


# -- commits and deletion ----------------------------------------------------------------


def test_a_member_commits_only_for_its_current_generation(coordinator):
    joined = join(coordinator)
    coordinator.check_commit(GROUP, joined.member_id, joined.generation)
    with pytest.raises(IllegalGenerationError):
        coordinator.check_commit(GROUP, joined.member_id, joined.generation + 1)
    with pytest.raises(UnknownMemberIdError):
        coordinator.check_commit(GROUP, "reader-never-joined", joined.generation)


def test_a_consumer_without_a_member_id_commits_only_while_the_group_has_no_members(
    coordinator,
):
    coordinator.check_commit(GROUP, "", -1)  # manual assignment, no group yet
    joined = join(coordinator)
    with pytest.raises(UnknownMemberIdError):
        coordinator.check_commit(GROUP, "", -1)
    coordinator.leave(GROUP, joined.member_id)
    coordinator.check_commit(GROUP, "", -1)


def test_only_an_empty_group_can_be_deleted(coordinator):
    joined = join(coordinator)
    with pytest.raises(NonEmptyGroupError):
        coordinator.delete_group(GROUP)
    coordinator.leave(GROUP, joined.member_id)
    coordinator.delete_group(GROUP)
    assert coordinator.snapshot(GROUP) is None
