"""The classic protocol's waits as completions, as Kafka's coordinator parks them (DelayedJoin
in its purgatory, a follower's SyncGroup as an awaiting future): a JoinGroup waits until every
member has joined or the rebalance timeout passes, a follower's SyncGroup until its leader's
SyncGroup, and neither holds a thread meanwhile. The call leaves a `Waiter` on its group and
returns a Future; whoever changes the group (another member's join, sync or leave, the
session reaper's timers, a coordinator stopping or giving the group up) settles the group's
waiters under the coordinator's lock, and the futures are completed after the lock is
released, so what completion runs (an adapter encoding and sending an answer) never runs
under it.

A waiting call whose client goes away (its connection closed: the future is cancelled) is
treated as Kafka treats a member that leaves: a dynamic member is removed, so the rebalance
goes on without it instead of waiting out its timeout; a static member keeps its place (that
is what static membership is for: it comes back under its instance id) and only its answer
is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, InvalidStateError
from contextlib import contextmanager
from typing import Any

from seglog.errors import (
    FencedInstanceIdError,
    RebalanceInProgressError,
    SeglogError,
    UnknownMemberIdError,
)

from .group_state import COMPLETING_REBALANCE, CoordinatorParts, Group, Member, Waiter

# A settled wait: the future, and its answer or its error.
Settled = tuple[Future[Any], Any, SeglogError | None]


@contextmanager
def settling(coordinator: CoordinatorParts) -> Iterator[list[Group]]:
    """The coordinator's lock, for a call that changes groups: the groups it names in the
    yielded list have their waiters settled before the lock is released, and the settled
    futures are completed after."""
    touched: list[Group] = []
    settled: list[Settled] = []
    try:
        with coordinator._lock:
            try:
                yield touched
            finally:
                stopping = coordinator._stop.is_set()
                settled = [each for group in touched for each in settle(group, stopping)]
    finally:
        complete(settled)


def wait_in(coordinator: CoordinatorParts, group: Group, waiter: Waiter) -> None:
    """`waiter` left on its group (the lock held), and watched: cancelled, its member
    leaves as the module's docstring says."""
    group.waiters.append(waiter)

    def abandoned(future: Future[Any]) -> None:
        if not future.cancelled():
            return
        member = waiter.member
        with settling(coordinator) as touched:
            if waiter in group.waiters:
                group.waiters.remove(waiter)
            if coordinator._groups.get(group.group_id) is not group:
                return  # given up meanwhile: its waits have ended
            if group.members.get(member.member_id) is not member:
                return
            if any(other.member is member for other in group.waiters):
                return  # it waits on another connection too (a client that reconnected)
            touched.append(group)
            if member.group_instance_id is None:
                coordinator._remove(group, member.member_id, time.monotonic())
            elif waiter.sync_generation is not None:
                member.awaiting_sync = False

    waiter.future.add_done_callback(abandoned)


def settle(group: Group, stopping: bool) -> list[Settled]:
    """The group's waiters whose wait is over, taken off the group with their outcomes
    (the coordinator's lock held); the others stay."""
    settled: list[Settled] = []
    kept: list[Waiter] = []
    for waiter in group.waiters:
        outcome = _outcome(group, waiter, stopping)
        if outcome is None:
            kept.append(waiter)
        else:
            settled.append((waiter.future, *outcome))
    group.waiters = kept
    return settled


def complete(settled: Iterable[Settled]) -> None:
    """Each settled wait's future completed (the lock released): a future cancelled meanwhile
    (its client went away) is left as it is."""
    for future, answer, error in settled:
        try:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(answer)
        except InvalidStateError:
            pass


def _outcome(group: Group, waiter: Waiter, stopping: bool) -> tuple[Any, SeglogError | None] | None:
    """(answer, error) once the wait is over, else None: the blocking loops' conditions, in
    their order."""
    member = waiter.member
    if waiter.future.cancelled():
        return None, None  # its client is gone; nothing to answer
    if waiter.sync_generation is None:
        if member.join_answer is not None:
            return member.join_answer, None
        if stopping:
            return None, RebalanceInProgressError("the coordinator is shutting down")
        if group.members.get(member.member_id) is not member:
            return None, gone(group, member)
        return None
    if not member.awaiting_sync:
        return (group.protocol_type, group.strategy, member.assignment_bytes), None
    problem: SeglogError | None = None
    if stopping:
        problem = RebalanceInProgressError("the coordinator is shutting down")
    elif group.members.get(member.member_id) is not member:
        problem = gone(group, member)
    elif group.generation != waiter.sync_generation or group.state != COMPLETING_REBALANCE:
        problem = RebalanceInProgressError(f"group {group.group_id} is rebalancing: join again")
    if problem is None:
        return None
    member.awaiting_sync = False
    return None, problem


def gone(group: Group, member: Member) -> SeglogError:
    """Why a waiting member's call ends when it is no longer in its group."""
    if group.static_member(member.group_instance_id) is not None:
        return FencedInstanceIdError(
            f"instance {member.group_instance_id} of group {group.group_id} joined again "
            f"under another member id"
        )
    return UnknownMemberIdError(f"member {member.member_id} was removed from {group.group_id}")
