"""Joins that cannot keep a group rebalancing or hold the coordinator's threads
(services/gateway/groups/managed_protocol.py): a stable member's rejoin with the same
subscription is answered at once, and a join the coordinator has no thread for is recorded
and answered with the id to call again with."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from seglog.errors import GroupMaxSizeReachedError
from services.gateway.groups.coordinator import PREPARING_REBALANCE, STABLE
from services.gateway.groups.managed_protocol import JoinAgainLater

GROUP = "readers"
JOIN_TIMEOUT_S = 30


def join(coordinator, member_id="", *, topics=("events",), wait=True):
    return coordinator.managed.join(
        GROUP,
        member_id,
        client_id="reader",
        client_host="127.0.0.1",
        topics=topics,
        strategies=("range",),
        session_timeout_ms=10_000,
        rebalance_timeout_ms=120_000,
        wait=wait,
    )


def test_a_stable_members_rejoin_with_the_same_subscription_starts_no_rebalance(coordinator):
    first = join(coordinator)
    for _ in range(100):
        again = join(coordinator, first.member_id)
        assert again.generation == first.generation and again.assignment == first.assignment
    assert coordinator.snapshot(GROUP).state == STABLE


def test_a_rejoin_with_another_subscription_rebalances(coordinator):
    first = join(coordinator)
    again = join(coordinator, first.member_id, topics=("events", "other"))
    assert again.generation == first.generation + 1


def test_a_join_without_a_thread_is_recorded_and_answered_when_called_again(coordinator):
    first = join(coordinator)
    with pytest.raises(JoinAgainLater) as refused:
        join(coordinator, wait=False)
    second_id = refused.value.member_id
    assert second_id and refused.value.reason == "REBALANCE_IN_PROGRESS"
    assert coordinator.snapshot(GROUP).state == PREPARING_REBALANCE
    with ThreadPoolExecutor(1) as pool:
        # The first member rejoins as its heartbeat tells it to: everyone has joined.
        rejoined = pool.submit(join, coordinator, first.member_id).result(JOIN_TIMEOUT_S)
    assert rejoined.generation == first.generation + 1
    second = join(coordinator, second_id, wait=False)
    assert second.generation == rejoined.generation
    assert sorted(second.assignment["events"] + rejoined.assignment["events"]) == [0, 1, 2, 3]


def test_a_new_member_past_group_max_size_is_refused_and_known_ones_still_rejoin(
    make_coordinator,
):
    coordinator = make_coordinator(group_max_size=2)
    first = join(coordinator)
    with pytest.raises(JoinAgainLater) as recorded:
        join(coordinator, wait=False)
    second_id = recorded.value.member_id
    with ThreadPoolExecutor(1) as pool:
        pool.submit(join, coordinator, first.member_id).result(JOIN_TIMEOUT_S)
    second = join(coordinator, second_id)
    with pytest.raises(GroupMaxSizeReachedError):
        join(coordinator)
    assert len(coordinator.snapshot(GROUP).members) == 2
    assert join(coordinator, second.member_id).generation == second.generation
