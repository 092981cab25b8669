"""A follower whose log diverged from its leader's (a fault campaign's repartition topic,
followers refusing their leader's batch "below the next offset" for good): segments are
never rolled below the log end, and a leader's batch holding the follower's log end makes
the follower cut there and fetch again rather than refuse forever."""

from __future__ import annotations

from seglog.storage import Log, LogConfig
from services.storage_node.follower_truncation import cut_at_leader_batch
from tests.batches import make_batch


def _fill(log: Log, count: int, now_ms: int, *, epoch: int = 0) -> None:
    for i in range(count):
        log.append(make_batch([b"v%03d" % i] * 2, timestamp_ms=now_ms + i), leader_epoch=epoch)


def test_a_leader_segment_starting_below_the_followers_end_is_not_mirrored(tmp_path, now_ms):
    # The leader rolled at some offset X; this follower holds offsets past X in its active
    # segment (taken from an earlier leader that had not rolled there). The next fetch comes
    # from the leader's segment X: rolling at X named a segment below offsets the one before
    # it holds, which the load after a crash cut away ("expected last offset < X, the next
    # segment's base offset"), with the valid batches after it.
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig(segment_bytes=1200))
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig())
    _fill(leader, 40, now_ms)
    rolled_at = leader.segments[1].base_offset
    while follower.log_end_offset < rolled_at + 4:  # past X, without the leader's rolls
        follower.append_as_follower(leader.read(follower.log_end_offset, 80))
    found = leader.locate_records(follower.log_end_offset, 1 << 20)
    assert found.segment_slice is not None
    assert found.segment_slice.segment.base_offset == rolled_at < follower.log_end_offset
    follower.append_as_follower(found.read(), segment_base_offset=rolled_at)
    end = follower.log_end_offset
    for segment in follower.segments[1:]:
        assert segment.base_offset >= rolled_at + 4  # never named below what it follows
    assert follower.read(rolled_at, 1 << 20)[:8] == leader.read(rolled_at, 1 << 20)[:8]
    follower.close()  # not flushed: the next open checks the segment boundaries
    reopened = Log.open(tmp_path / "follower" / "t-0", LogConfig())
    assert reopened.log_end_offset == end
    for offset in (0, rolled_at, rolled_at + 4, end - 1):  # the same batch, read anywhere
        assert reopened.read(offset, 80)[:12] == leader.read(offset, 80)[:12]
    reopened.close()
    leader.close()


def test_a_follower_ending_inside_the_leaders_batch_cuts_and_fetches_again(tmp_path, now_ms):
    # Same epoch, different batch boundaries: the follower holds [0..1] [2] [3..4], the
    # leader [0..1] [2..3] [4..5]; the follower's end 5 falls inside the leader's [4..5],
    # whose fetch answer starts at 4, below it: refused forever before.
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig())
    other = Log.open(tmp_path / "other" / "t-0", LogConfig())
    for values in ([b"a", b"b"], [b"c", b"d"], [b"e", b"f"]):
        leader.append(make_batch(values, timestamp_ms=now_ms), leader_epoch=1)
    for values in ([b"a", b"b"], [b"c"], [b"d", b"e"]):
        other.append(make_batch(values, timestamp_ms=now_ms), leader_epoch=1)
    follower.append_as_follower(other.read(0, 1 << 20))
    assert follower.log_end_offset == 5
    answer = leader.read(follower.log_end_offset, 1 << 20)
    assert cut_at_leader_batch(follower, answer) == 4
    # Whole batches: the follower's [3..4] holds 4, so its end moves to 3, and so on down
    # until the leader's answer starts at the follower's end.
    rounds = 0
    while follower.log_end_offset < leader.log_end_offset:
        answer = leader.read(follower.log_end_offset, 1 << 20)
        if cut_at_leader_batch(follower, answer) is None:
            follower.append_as_follower(answer)
        rounds += 1
        assert rounds < 10
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    # A matching answer is left alone.
    assert cut_at_leader_batch(follower, b"") is None
    leader.append(make_batch([b"g"], timestamp_ms=now_ms), leader_epoch=1)
    assert cut_at_leader_batch(follower, leader.read(6, 1 << 20)) is None
    assert follower.log_end_offset == 6
    for log in (leader, follower, other):
        log.close()
