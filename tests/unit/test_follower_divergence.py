"""A follower whose log diverged from its leader's (a fault campaign's repartition topic,
followers refusing their leader's batch "below the next offset" for good): segments are
never rolled below the log end, and a leader's batch holding the follower's log end makes
the follower cut there and fetch again rather than refuse forever."""

from __future__ import annotations

from pathlib import Path

from seglog.records.batch import HEADER_BYTES, LOG_OVERHEAD, read_header
from seglog.storage import Log, LogConfig
from seglog.storage.config import LogManagerConfig
from seglog.storage.log_manager import LogManager
from seglog.v1 import common_pb2
from services.storage_node.follower_truncation import cut_at_leader_batch
from services.storage_node.partition import Registration
from services.storage_node.replica_fetcher import FetcherSettings, ReplicaFetcher
from services.storage_node.replica_manager import ReplicaManager
from tests.batches import make_batch


def _fill(log: Log, count: int, now_ms: int, *, epoch: int = 0) -> None:
    for i in range(count):
        log.append(make_batch([b"v%03d" % i] * 2, timestamp_ms=now_ms + i), leader_epoch=epoch)


def _follow_past_the_leaders_roll(tmp_path: Path, now_ms: int) -> tuple[Log, Log, int]:
    """A leader rolled at X; its follower holds offsets past X in its active segment (taken
    from an earlier leader that had not rolled there), then fetches from the leader's
    segment X."""
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig(segment_bytes=1200))
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig())
    _fill(leader, 40, now_ms)
    rolled_at = leader.segments[1].base_offset
    while follower.log_end_offset < rolled_at + 4:
        follower.append_as_follower(leader.read(follower.log_end_offset, 80))
    found = leader.locate_records(follower.log_end_offset, 1 << 20)
    assert found.segment_slice is not None
    assert found.segment_slice.segment.base_offset == rolled_at < follower.log_end_offset
    follower.append_as_follower(found.read(), segment_base_offset=rolled_at)
    return leader, follower, rolled_at


def _batch_spans(records: bytes) -> list[tuple[int, int]]:
    spans, position = [], 0
    while position + HEADER_BYTES <= len(records):
        header = read_header(records, position)
        spans.append((header.base_offset, header.last_offset))
        position += LOG_OVERHEAD + header.batch_length
    return spans


def test_a_leader_segment_starting_below_the_followers_end_is_not_mirrored(tmp_path, now_ms):
    # The leader rolled at some offset X; this follower holds offsets past X in its active
    # segment (taken from an earlier leader that had not rolled there). The next fetch comes
    # from the leader's segment X: rolling at X named a segment below offsets the one before
    # it holds, which the load after a crash cut away ("expected last offset < X, the next
    # segment's base offset"), with the valid batches after it.
    leader, follower, rolled_at = _follow_past_the_leaders_roll(tmp_path, now_ms)
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


def test_a_follower_truncated_then_leading_holds_each_offset_once(tmp_path, now_ms):
    # The campaign's chain: the follower's segment named below what it followed, a
    # truncation by leader epoch cut only that last segment and put the log end below the
    # truncation point, so the new leader's batches went in beside the old ones the segment
    # before still held. Leading, it answered a read through the old batches, then the next
    # read with a new batch starting below the reader's end: refused for good.
    leader, follower, rolled_at = _follow_past_the_leaders_roll(tmp_path, now_ms)
    cut_at = rolled_at + 2
    follower.truncate_to(cut_at)
    assert follower.log_end_offset == cut_at
    for i in range(3):
        follower.append(make_batch([b"n%d" % i] * 3, timestamp_ms=now_ms), leader_epoch=1)
    offset, spans = 0, []
    while offset < follower.log_end_offset:  # a replica fetching from it, batch by batch
        answer = _batch_spans(follower.read(offset, 1 << 20))
        assert answer[0][0] == offset, (offset, answer[:2])
        spans += answer
        offset = answer[-1][1] + 1
    assert spans[-3:] == [(cut_at, cut_at + 2), (cut_at + 3, cut_at + 5), (cut_at + 6, cut_at + 8)]
    leader.close()
    follower.close()


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


def test_the_replica_fetcher_cuts_and_fetches_again_instead_of_refusing(tmp_path, now_ms):
    # The fetcher's path for a leader's answer (its own thread never started): the
    # campaign's followers logged "below the next offset" on every round until the end.
    logs = LogManager(LogManagerConfig(log_dirs=(str(tmp_path / "node-1"),)), LogConfig())
    logs.startup()
    replicas = ReplicaManager(logs, node_id=1)
    replicas.apply_state("t", 0, {}, Registration(3, 1, 1, (1, 3), (1, 3)))  # 3 leads
    held = replicas.partition("t", 0)
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    other = Log.open(tmp_path / "other" / "t-0", LogConfig())
    for values in ([b"a", b"b"], [b"c", b"d"], [b"e", b"f"]):
        leader.append(make_batch(values, timestamp_ms=now_ms), leader_epoch=1)
    for values in ([b"a", b"b"], [b"c"], [b"d", b"e"]):
        other.append(make_batch(values, timestamp_ms=now_ms), leader_epoch=1)
    held.log.append_as_follower(other.read(0, 1 << 20))
    fetcher = ReplicaFetcher(1, 3, "127.0.0.1:9", FetcherSettings())
    try:
        fetcher.add_partition(held)
        _, followed = fetcher._build_request()
        for _ in range(5):
            end = held.log.log_end_offset
            if end == leader.log_end_offset:
                break
            answer = common_pb2.FetchResponse(
                topic="t", partition=0, high_watermark=leader.log_end_offset
            )
            fetcher._apply(answer, leader.read(end, 1 << 20), followed)
        assert held.log.read(0, 1 << 20) == leader.read(0, 1 << 20)
    finally:
        fetcher.shutdown()
        replicas.stop()
        logs.shutdown()
        leader.close()
        other.close()
