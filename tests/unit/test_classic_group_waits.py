"""The classic protocol's waits as completions (services/gateway/groups/classic_waits.py): a
JoinGroup or a follower's SyncGroup that must wait returns a Future that the call or timer
ending the wait completes, with no thread waiting meanwhile (none is started here); a wait
given up (its client gone) removes a dynamic member as a leave does and keeps a static one;
the rebalance timeout ends waits the members never end. Direct calls on a real coordinator;
every wait has a deadline."""

from __future__ import annotations

import pytest

from seglog.errors import RebalanceInProgressError
from services.gateway.groups.coordinator import COMPLETING_REBALANCE, PREPARING_REBALANCE
from tests.waiting import wait_until

GROUP = "waiting-readers"
LONG_MS = 120_000  # never passes while a test runs: only the members' calls end a wait
SHORT_MS = 300  # a rebalance timeout the test waits out
CALL_TIMEOUT_S = 30
RANGE = (("range", b"\x00"),)


def start_join(coordinator, member_id="", *, instance=None, rebalance_timeout_ms=LONG_MS):
    return coordinator.classic.start_join_classic(
        GROUP,
        member_id,
        group_instance_id=instance,
        client_id="reader",
        client_host="127.0.0.1",
        protocol_type="consumer",
        protocols=RANGE,
        session_timeout_ms=LONG_MS,
        rebalance_timeout_ms=rebalance_timeout_ms,
        require_known_member_id=False,
    )


def start_sync(coordinator, joined, assignments=None):
    return coordinator.classic.start_sync_group(
        GROUP,
        joined.member_id,
        joined.generation,
        group_instance_id=None,
        protocol_type="consumer",
        protocol=joined.protocol,
        assignments=assignments or {},
    )


def members(coordinator):
    return set(coordinator.snapshot(GROUP).members)


def stable_leader(coordinator, **join):
    """A group of one member, synced: a member joining it waits for the leader."""
    leader = start_join(coordinator, **join).result(timeout=CALL_TIMEOUT_S)
    start_sync(coordinator, leader).result(timeout=CALL_TIMEOUT_S)
    return leader


def test_a_waiting_join_is_a_future_the_last_member_to_join_completes(coordinator):
    leader = stable_leader(coordinator)
    waiting = start_join(coordinator)
    assert not waiting.done()
    rejoined = start_join(coordinator, leader.member_id)
    assert rejoined.done()  # the last to join completes the rebalance, and every wait in it
    joined = waiting.result(timeout=0)
    assert joined.generation == leader.generation + 1 == rejoined.result().generation
    assert joined.leader == leader.member_id and joined.members == ()
    # The follower's sync waits for the leader's, which completes it.
    synced = start_sync(coordinator, joined)
    assert not synced.done()
    plan = {joined.member_id: b"given"}
    start_sync(coordinator, rejoined.result(), plan).result(timeout=0)
    assert synced.result(timeout=0) == ("consumer", "range", b"given")


def test_a_join_given_up_removes_its_dynamic_member_and_the_rebalance_goes_on(coordinator):
    leader = stable_leader(coordinator)
    waiting = start_join(coordinator)
    assert wait_until(lambda: len(members(coordinator)) == 2)
    assert waiting.cancel()
    assert members(coordinator) == {leader.member_id}
    rejoined = start_join(coordinator, leader.member_id).result(timeout=0)
    assert [m for m, _, _ in rejoined.members] == [leader.member_id]


def test_a_join_given_up_keeps_a_static_member_in_its_place(coordinator):
    leader = stable_leader(coordinator)
    waiting = start_join(coordinator, instance="reader-b")
    assert waiting.cancel()
    [static] = members(coordinator) - {leader.member_id}
    rejoined = start_join(coordinator, leader.member_id).result(timeout=0)
    assert {m for m, _, _ in rejoined.members} == {leader.member_id, static}


def test_a_follower_sync_given_up_sends_the_group_back_to_join(coordinator):
    leader = stable_leader(coordinator)
    waiting = start_join(coordinator)
    start_join(coordinator, leader.member_id).result(timeout=0)
    synced = start_sync(coordinator, waiting.result(timeout=0))
    assert coordinator.snapshot(GROUP).state == COMPLETING_REBALANCE
    assert synced.cancel()
    assert members(coordinator) == {leader.member_id}
    assert coordinator.snapshot(GROUP).state == PREPARING_REBALANCE


def test_the_rebalance_timeout_ends_waits_the_members_never_end(coordinator):
    leader = stable_leader(coordinator, rebalance_timeout_ms=SHORT_MS)
    # The leader never joins again: at the timeout the rebalance completes without it.
    newcomer = start_join(coordinator, rebalance_timeout_ms=SHORT_MS)
    joined = newcomer.result(timeout=CALL_TIMEOUT_S)
    assert joined.leader == joined.member_id and members(coordinator) == {joined.member_id}
    assert joined.generation == leader.generation + 1
    # A follower whose leader never syncs: the leader is removed at the timeout and the
    # follower sent back to join.
    follower = start_join(coordinator, rebalance_timeout_ms=SHORT_MS)
    start_join(coordinator, joined.member_id, rebalance_timeout_ms=SHORT_MS).result(timeout=0)
    synced = start_sync(coordinator, follower.result(timeout=0))
    with pytest.raises(RebalanceInProgressError):
        synced.result(timeout=CALL_TIMEOUT_S)


def test_a_coordinator_closing_ends_every_wait(coordinator):
    stable_leader(coordinator)
    waiting = start_join(coordinator)
    coordinator.close()
    with pytest.raises(RebalanceInProgressError):
        waiting.result(timeout=0)
