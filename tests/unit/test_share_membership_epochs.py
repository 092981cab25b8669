"""A share group member's epoch and assignment move only in its own heartbeat, as Kafka's share
groups reconcile them: members joining one after another reassign the group each time, and a
member that missed several of those reassignments is answered its new assignment, not fenced
(FENCED_MEMBER_EPOCH made every earlier member of a group of 8 rejoin as the later ones came)."""

from __future__ import annotations

import pytest

from seglog.coordinator_errors import FencedMemberEpochError
from services.gateway.share.share_membership import ShareHeartbeat, ShareMembership

GROUP, TOPIC = "g", "queue"


def _membership() -> ShareMembership:
    return ShareMembership(
        lambda topic: 2 if topic == TOPIC else 0,
        lambda group, member: None,
        heartbeat_interval_ms=5000,
        session_timeout_ms=45_000,
        max_size=100,
    )


def _beat(member_id: str, epoch: int) -> ShareHeartbeat:
    return ShareHeartbeat(
        GROUP, member_id, epoch, None, (TOPIC,) if epoch == 0 else None, "c", "127.0.0.1"
    )


def test_members_joining_one_after_another_fence_none_of_the_earlier_ones():
    membership = _membership()
    epochs: dict[str, int] = {}
    held: dict[str, dict[str, tuple[int, ...]]] = {}
    for index in range(8):
        member_id = f"m-{index}"
        answer = membership.heartbeat(_beat(member_id, 0))
        epochs[member_id] = answer.member_epoch
        held[member_id] = answer.assignment or {}
    for _ in range(2):  # everyone heartbeats with the epoch it was last answered
        for member_id, epoch in epochs.items():
            answer = membership.heartbeat(_beat(member_id, epoch))
            assert answer.member_epoch >= epoch
            epochs[member_id] = answer.member_epoch
            if answer.assignment is not None:
                held[member_id] = answer.assignment
    assert len(set(epochs.values())) == 1  # all at the group's assignment epoch
    partitions = sorted(p for a in held.values() for p in a.get(TOPIC, ()))
    assert set(partitions) == {0, 1} and all(held.values())


def test_an_epoch_the_member_never_had_is_still_fenced():
    membership = _membership()
    joined = membership.heartbeat(_beat("m-0", 0))
    with pytest.raises(FencedMemberEpochError):
        membership.heartbeat(_beat("m-0", joined.member_epoch + 5))
