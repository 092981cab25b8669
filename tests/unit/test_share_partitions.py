"""Share partitions' state machine (share/share_partition.py), their records in
__share_group_state (share/state_formats.py), the simple assignor and membership, and share
sessions: pure code, times given as numbers, no clock read."""

from __future__ import annotations

import uuid

import pytest

from seglog.coordinator_errors import (
    FencedMemberEpochError,
    InvalidRecordStateError,
    InvalidShareSessionEpochError,
    ShareSessionLimitReachedError,
    ShareSessionNotFoundError,
)
from seglog.errors import InvalidRequestError, UnknownMemberIdError
from services.gateway.share.share_membership import (
    ShareHeartbeat,
    ShareMember,
    ShareMembership,
    simple_assign,
)
from services.gateway.share.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    AcquiredRange,
    FetchedBatch,
    PartitionLimits,
    SharePartition,
    StateBatch,
)
from services.gateway.share.share_sessions import ShareSessions
from services.gateway.share.state_formats import (
    UPDATE_TYPE,
    ShareState,
    StateKey,
    apply_update,
    decode_key,
    decode_snapshot,
    encode_key,
    encode_snapshot,
)

LIMITS = PartitionLimits(lock_duration_s=30.0, delivery_count_limit=3, max_record_locks=100)


def batch(first: int, last: int, control: bool = False) -> FetchedBatch:
    return FetchedBatch(first, last, control)


def test_records_are_acquired_once_until_released_then_counted_again():
    p = SharePartition(LIMITS, 0)
    assert p.acquire("a", 0, [batch(0, 9)], 4, now=0) == [AcquiredRange(0, 3, 1)]
    # Another member fetching the same batch gets only what is not locked.
    assert p.acquire("b", 0, [batch(0, 9)], 100, now=0) == [AcquiredRange(4, 9, 1)]
    p.acknowledge("a", 0, 3, (RELEASE,), now=1)
    assert p.next_fetch_offset() == 0
    assert p.acquire("b", 0, [batch(0, 9)], 100, now=1) == [AcquiredRange(0, 3, 2)]


def test_acknowledging_moves_the_start_offset_over_finished_records_only():
    p = SharePartition(LIMITS, 0)
    p.acquire("a", 0, [batch(0, 4)], 100, now=0)
    p.acknowledge("a", 1, 2, (ACCEPT,), now=0)
    assert p.start_offset == 0  # 0 is still acquired
    p.acknowledge("a", 0, 0, (REJECT,), now=0)
    assert p.start_offset == 3
    p.acknowledge("a", 3, 4, (ACCEPT, GAP), now=0)
    assert (p.start_offset, p.end_offset, len(p.runs)) == (5, 5, 0)


def test_only_the_holder_may_acknowledge_and_a_bad_batch_changes_nothing():
    p = SharePartition(LIMITS, 0)
    p.acquire("a", 0, [batch(0, 4)], 100, now=0)
    with pytest.raises(InvalidRecordStateError):
        p.acknowledge("b", 0, 0, (ACCEPT,), now=0)
    with pytest.raises(InvalidRecordStateError):  # 5 was never delivered
        p.acknowledge("a", 3, 5, (ACCEPT,), now=0)
    with pytest.raises(InvalidRequestError):
        p.acknowledge("a", 0, 4, (ACCEPT, ACCEPT), now=0)
    with pytest.raises(InvalidRequestError):
        p.acknowledge("a", 0, 0, (9,), now=0)
    with pytest.raises(InvalidRecordStateError):  # refused before any per-offset loop
        p.acknowledge("a", 0, 2**62, (ACCEPT,), now=0)
    assert p.start_offset == 0 and p.in_flight() == 5


def test_a_lapsed_lock_frees_the_record_and_the_limit_archives_it():
    p = SharePartition(LIMITS, 0)
    for delivery in range(1, 4):
        assert p.acquire("a", 0, [batch(0, 0)], 10, now=delivery * 100) == [
            AcquiredRange(0, 0, delivery)
        ]
        assert p.expire_locks(delivery * 100 + 29) == 0
        assert p.expire_locks(delivery * 100 + 30) == 1
    # Delivered three times (the limit): archived, and the start offset moves past it.
    assert p.start_offset == 1 and p.acquire("a", 0, [batch(0, 0)], 10, now=1000) == []


def test_renew_keeps_the_lock_and_a_member_gone_releases_what_it_held():
    p = SharePartition(LIMITS, 0)
    p.acquire("a", 0, [batch(0, 1)], 10, now=0)
    p.acknowledge("a", 0, 0, (RENEW,), now=20)
    assert p.expire_locks(40) == 1  # offset 1's lock lapsed at 30, 0's runs to 50
    assert p.release_member("a") == 1
    assert p.acquire("b", 0, [batch(0, 1)], 10, now=50) == [AcquiredRange(0, 1, 2)]


def test_offsets_the_log_lacks_and_control_batches_are_never_delivered():
    p = SharePartition(LIMITS, 0)
    # 0..4 compacted away, 5..6 a control batch, 7..8 records.
    assert p.acquire("a", 0, [batch(5, 6, control=True), batch(7, 8)], 10, now=0) == [
        AcquiredRange(7, 8, 1)
    ]
    p.acknowledge("a", 7, 8, (ACCEPT,), now=0)
    assert (p.start_offset, p.end_offset, len(p.runs)) == (9, 9, 0)


def test_in_flight_records_are_bounded():
    p = SharePartition(PartitionLimits(30.0, 3, 4), 0)
    assert p.acquire("a", 0, [batch(0, 9)], 100, now=0) == [AcquiredRange(0, 3, 1)]
    assert p.next_fetch_offset() is None


def test_the_state_written_and_read_back_redelivers_only_what_was_not_finished():
    p = SharePartition(LIMITS, 10)
    p.acquire("a", 10, [batch(10, 15)], 100, now=0)
    p.acknowledge("a", 11, 11, (ACCEPT,), now=0)
    p.acknowledge("a", 12, 12, (RELEASE,), now=0)
    p.acknowledge("a", 13, 13, (REJECT,), now=0)
    batches = p.state_batches()
    # Acquired records are written as available with their count (a failover redelivers
    # them, counted).
    assert batches == [
        StateBatch(10, 10, AVAILABLE, 1),
        StateBatch(11, 11, ACKNOWLEDGED, 1),
        StateBatch(12, 12, AVAILABLE, 1),
        StateBatch(13, 13, ARCHIVED, 1),
        StateBatch(14, 15, AVAILABLE, 1),
    ]
    back = SharePartition.from_state(LIMITS, p.start_offset, batches, 0)
    assert back.acquire("b", 10, [batch(10, 17)], 100, now=0) == [
        AcquiredRange(10, 10, 2),
        AcquiredRange(12, 12, 2),
        AcquiredRange(14, 15, 2),
        AcquiredRange(16, 17, 1),
    ]


def test_share_snapshot_records_round_trip_and_updates_apply_over_them():
    key = StateKey("g", uuid.uuid4(), 3)
    assert decode_key(encode_key(key)) == (0, key)
    assert decode_key(encode_key(key, UPDATE_TYPE)) == (1, key)
    state = ShareState(
        0, 2, -1, 100, 5, 6, (StateBatch(100, 104, AVAILABLE, 2), StateBatch(105, 105, 4, 1))
    )
    assert decode_snapshot(encode_snapshot(state)) == state
    assert decode_snapshot(encode_snapshot(state, delivery_complete_count=7)) == state
    updated = apply_update(state, 102, (StateBatch(102, 103, ACKNOWLEDGED, 2),))
    assert updated.start_offset == 102
    assert updated.state_batches == (
        StateBatch(102, 103, ACKNOWLEDGED, 2),
        StateBatch(104, 104, AVAILABLE, 2),
        StateBatch(105, 105, 4, 1),
    )


def test_a_corrupt_snapshot_is_refused_before_anything_is_allocated_for_it():
    from seglog.errors import CorruptRecordError

    good = encode_snapshot(ShareState(0, 0, -1, 0, 0, 0, ()))
    lying = good[:-2] + b"\xff\xff\xff\x07"  # a batch count of 2^28 in 2 bytes
    with pytest.raises(CorruptRecordError):
        decode_snapshot(lying)


def member(name: str, *topics: str) -> ShareMember:
    return ShareMember(name, "c", "/h", None, tuple(topics))


def test_the_simple_assignor_shares_partitions_when_members_outnumber_them():
    counts = {"one": 1, "four": 4}.get
    few = simple_assign(
        [member("a", "one"), member("b", "one"), member("c", "one")], lambda t: counts(t) or 0
    )
    assert few == {"a": {"one": (0,)}, "b": {"one": (0,)}, "c": {"one": (0,)}}
    many = simple_assign([member("a", "four"), member("b", "four")], lambda t: counts(t) or 0)
    assert many == {"a": {"four": (0, 2)}, "b": {"four": (1, 3)}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def beat(member_id: str, epoch: int, topics=None) -> ShareHeartbeat:
    return ShareHeartbeat("g", member_id, epoch, None, topics, "c", "/h")


def test_membership_epochs_leaves_and_lapsed_sessions():
    clock = Clock()
    gone: list[tuple[str, str]] = []
    m = ShareMembership(
        lambda t: 2,
        lambda g, mid: gone.append((g, mid)),
        heartbeat_interval_ms=100,
        session_timeout_ms=1000,
        max_size=3,
        clock=clock,
    )
    a = m.heartbeat(beat("a", 0, ("t",)))
    assert a.assignment == {"t": (0, 1)} and a.member_epoch == 1
    assert m.heartbeat(beat("a", 1)).assignment is None  # unchanged: not sent again
    b = m.heartbeat(beat("b", 0, ("t",)))
    assert b.assignment == {"t": (1,)}
    a2 = m.heartbeat(beat("a", 1))
    assert a2.assignment == {"t": (0,)} and a2.member_epoch == b.member_epoch
    with pytest.raises(FencedMemberEpochError):
        m.heartbeat(beat("a", 99))
    with pytest.raises(UnknownMemberIdError):
        m.heartbeat(beat("nobody", 5))
    clock.now = 0.9
    m.heartbeat(beat("b", b.member_epoch))
    clock.now = 1.5  # a's session lapsed at 1.0 (its last heartbeat was at 0)
    b2 = m.heartbeat(beat("b", b.member_epoch))
    assert gone == [("g", "a")] and b2.assignment == {"t": (0, 1)}
    assert m.heartbeat(beat("b", -1)).member_epoch == -1 and gone[-1] == ("g", "b")
    assert m.group("g").state == "Empty"


def test_share_session_epochs():
    sessions = ShareSessions(max_sessions=1)
    with pytest.raises(ShareSessionNotFoundError):
        sessions.use("g", "m", 1, [], [])
    session = sessions.use("g", "m", 0, [("t", 0)], [])
    assert session is not None and session.epoch == 1
    with pytest.raises(InvalidShareSessionEpochError):
        sessions.use("g", "m", 2, [], [])
    session = sessions.use("g", "m", 1, [("t", 1)], [("t", 0)])
    assert session is not None and list(session.partitions) == [("t", 1)] and session.epoch == 2
    sessions.check("g", "m", 2)
    with pytest.raises(ShareSessionLimitReachedError):  # one session at most on this gateway
        sessions.use("g", "other", 0, [], [])
    assert sessions.use("g", "m", -1, [], []) is None and sessions.count() == 0


def test_costs_grow_with_batches_not_records():
    # A billion records in one fetched batch, acknowledged as two ranges: a handful of runs,
    # no per-record work (this would not finish if anything looped over offsets).
    p = SharePartition(PartitionLimits(30.0, 3, 10**10), 0)
    assert p.acquire("a", 0, [batch(0, 10**9 - 1)], 10**10, now=0) == [
        AcquiredRange(0, 10**9 - 1, 1)
    ]
    p.acknowledge("a", 10, 10**9 - 1, (ACCEPT,), now=1)
    p.acknowledge("a", 0, 9, (RELEASE, ACCEPT) * 5, now=1)
    assert len(p.runs) == 10 and p.waiting() == 5 and p.in_flight() == 0
    assert p.state_batches()[-1] == StateBatch(9, 10**9 - 1, ACKNOWLEDGED, 1)
    back = SharePartition.from_state(p.limits, 0, p.state_batches(), 0)
    assert back.acquire("b", 0, [batch(0, 10**9 + 4)], 10**10, now=2) == [
        AcquiredRange(o, o, 2) for o in range(0, 9, 2)
    ] + [AcquiredRange(10**9, 10**9 + 4, 1)]
