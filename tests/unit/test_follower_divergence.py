"""A follower whose log diverged from its leader's (a fault campaign's repartition topic,
followers refusing their leader's batch "below the next offset" for good): segments are
never rolled below the log end, and a leader's batch holding the follower's log end makes
the follower cut there and fetch again rather than refuse forever."""

from __future__ import annotations

from seglog.storage import Log, LogConfig
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
