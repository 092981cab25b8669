"""Leader epochs (Kafka's LeaderEpochFileCache and `leader-epoch-checkpoint`): assignment as
batches arrive, Kafka's endOffsetFor answers, truncation from either end, the file's format,
and rebuilding from the batches when a segment is recovered."""

from __future__ import annotations

import pytest

from seglog.errors import CorruptRecordError, InvalidRecordError
from seglog.storage import Log, LogConfig
from seglog.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCache,
    read_epoch_entries,
)
from tests.batches import make_batch


def test_end_offset_for_answers_as_kafka(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 10) == (-1, -1)  # nothing known
    cache.assign(2, 10)
    cache.assign(4, 30)
    cache.assign(7, 55)
    assert cache.end_offset_for(7, 80) == (7, 80)  # the latest epoch ends at the log end
    assert cache.end_offset_for(4, 80) == (4, 55)
    assert cache.end_offset_for(5, 80) == (4, 55)  # the largest epoch <= 5, ended at 7's start
    assert cache.end_offset_for(1, 80) == (1, 10)  # below every entry: the first start
    assert cache.end_offset_for(9, 80) == (-1, -1)
    assert cache.end_offset_for(-1, 80) == (-1, -1)


def test_assignment_evicts_what_it_contradicts_and_the_file_is_kafkas(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch, later start: nothing changes
    cache.assign(3, 100)
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n0 0\n3 100\n"
    cache.assign(2, 50)  # epoch 3 at 100 contradicts it: gone
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(2, 50)]
    cache.assign(5, 40)  # an earlier start evicts epoch 2 at 50
    assert cache.entries == [EpochEntry(0, 0), EpochEntry(5, 40)]
    assert LeaderEpochCache(tmp_path).entries == cache.entries  # read back
    cache.truncate_from_end(40)
    assert cache.entries == [EpochEntry(0, 0)]
    cache.assign(6, 60)
    cache.truncate_from_start(70)
    assert cache.entries == [EpochEntry(6, 70)]
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_text("0\n2\n1 5\n")
    with pytest.raises(CorruptRecordError, match="2 entries declared, 1 found"):
        read_epoch_entries(tmp_path / LEADER_EPOCH_CHECKPOINT)
    # The file is derived from the batches: the loader assigns every batch again.
    assert LeaderEpochCache(tmp_path).needs_rebuild


def test_a_log_tracks_epochs_through_appends_truncation_and_recovery(tmp_path, now_ms):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig(segment_bytes=400))
    for epoch, count in ((0, 3), (2, 4), (5, 2)):
        for _ in range(count):
            log.append(make_batch([b"x" * 40], timestamp_ms=now_ms), leader_epoch=epoch)
    assert log.leader_epochs.entries == [EpochEntry(0, 0), EpochEntry(2, 3), EpochEntry(5, 7)]
    assert log.end_offset_for_epoch(2) == (2, 7)
    assert log.end_offset_for_epoch(5) == (5, 9)
    assert len(log.segments) > 2
    log.truncate_to(6)  # a follower cutting a divergent suffix
    assert log.leader_epochs.entries == [EpochEntry(0, 0), EpochEntry(2, 3)]
    assert log.end_offset_for_epoch(2) == (2, 6)
    log.append(make_batch([b"y"], timestamp_ms=now_ms), leader_epoch=6)
    log.delete_records_before(4)
    assert log.leader_epochs.entries == [EpochEntry(2, 4), EpochEntry(6, 6)]
    # A crash (no close, no checkpoints written) that also lost the epoch file: recovery
    # rebuilds the epochs from the batches' partitionLeaderEpoch fields.
    (directory / LEADER_EPOCH_CHECKPOINT).unlink()
    reopened = Log.open(directory, LogConfig(segment_bytes=400))
    assert reopened.leader_epochs.entries == [
        EpochEntry(0, 0),
        EpochEntry(2, 3),
        EpochEntry(6, 6),
    ]
    reopened.close()


def test_batches_keep_their_own_epochs_without_a_leader_stamp(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0", LogConfig())
    raw = bytearray(make_batch([b"a", b"b"], timestamp_ms=now_ms))
    raw[12:16] = (3).to_bytes(4, "big")  # partitionLeaderEpoch: outside the CRC
    log.append(bytes(raw))
    assert log.leader_epochs.entries == [EpochEntry(3, 0)]
    log.close()


def _replicate(leader: Log, follower: Log, max_bytes: int) -> int:
    """Follower fetches from its log end, as a replica fetcher does; returns appends made."""
    appends = 0
    while follower.log_end_offset < leader.log_end_offset:
        found = leader.locate_records(follower.log_end_offset, max_bytes)
        assert found.segment_slice is not None
        follower.append_as_follower(
            found.read(), segment_base_offset=found.segment_slice.segment.base_offset
        )
        appends += 1
    return appends


def test_a_follower_appends_the_leaders_bytes_and_ends_byte_identical(tmp_path, now_ms):
    config = LogConfig(segment_bytes=2000, index_interval_bytes=300)
    leader = Log.open(tmp_path / "leader" / "t-0", config)
    follower = Log.open(tmp_path / "follower" / "t-0", config)
    for i in range(60):
        epoch = 0 if i < 25 else 3
        values = [b"v%d-" % i * (1 + i % 7)] * (1 + i % 4)
        leader.append(make_batch(values, timestamp_ms=now_ms + i), leader_epoch=epoch)
    assert _replicate(leader, follower, max_bytes=700) > len(leader.segments)
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.leader_epochs.entries == leader.leader_epochs.entries
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    leader.close()
    follower.close()
    names = sorted(p.name for p in (tmp_path / "leader" / "t-0").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "follower" / "t-0").iterdir())
    for name in names:
        ours = (tmp_path / "follower" / "t-0" / name).read_bytes()
        assert ours == (tmp_path / "leader" / "t-0" / name).read_bytes(), name


def test_a_follower_refuses_what_it_cannot_append_as_is(tmp_path, now_ms):
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig())
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig())
    for _ in range(3):
        leader.append(make_batch([b"x", b"y"], timestamp_ms=now_ms), leader_epoch=1)
    data = leader.read(0, 1 << 20)
    follower.append_as_follower(data)
    with pytest.raises(InvalidRecordError, match="below the next offset 6"):
        follower.append_as_follower(data)  # offsets already held
    leader.append(make_batch([b"z"], timestamp_ms=now_ms), leader_epoch=1)
    corrupt = bytearray(leader.read(6, 1 << 20))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        follower.append_as_follower(bytes(corrupt))
    assert follower.log_end_offset == 6  # nothing of a refused append is written
    # A batch past a gap, as a damaged leader would send one (bit 60 of its baseOffset,
    # outside the CRC): refused on a log that is not compacted, where gaps cannot be.
    damaged = bytearray(leader.read(6, 1 << 20))
    damaged[0] ^= 0x10
    with pytest.raises(CorruptRecordError, match="past the next offset 6"):
        follower.append_as_follower(bytes(damaged))
    compacted = Log.open(tmp_path / "compacted" / "t-0", LogConfig(cleanup_policy="compact"))
    compacted.append_as_follower(leader.read(6, 1 << 20))  # a compacted leader's gaps
    assert compacted.log_end_offset == 7
    compacted.close()
    follower.append_as_follower(leader.read(6, 1 << 20))
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    leader.close()
    follower.close()


def test_truncating_at_the_log_end_drops_an_epoch_that_starts_there(tmp_path, now_ms):
    # A replica that became leader (epoch 3 recorded at its log end) and appended nothing
    # before losing the leadership: the empty epoch must go, or every fetch would diverge.
    log = Log.open(tmp_path / "t-0")
    log.append(make_batch([b"a"], timestamp_ms=now_ms), leader_epoch=1)
    log.leader_epochs.assign(3, log.log_end_offset)
    log.truncate_to(log.log_end_offset)
    assert log.leader_epochs.entries == [EpochEntry(1, 0)]


def test_a_new_logs_first_entry_waits_for_the_flush_to_be_synced(tmp_path):
    """Written without fsync while the log holds no batch (KAFKA-15046's reasoning, see the
    module); the flush after appends syncs it before it moves the recovery point. Any other
    change is synced at once."""
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.leader_epochs.assign(3, 0, log_holds_batches=False)
    assert log.leader_epochs.sync_pending
    assert read_epoch_entries(log.leader_epochs.path) == [EpochEntry(3, 0)]  # written, renamed
    log.flush()  # nothing appended: nothing to make durable yet
    assert log.leader_epochs.sync_pending
    log.append(make_batch([b"a"]), leader_epoch=3)
    log.flush()
    assert not log.leader_epochs.sync_pending
    log.leader_epochs.assign(4, 1, log_holds_batches=False)  # an older entry stays: synced
    assert not log.leader_epochs.sync_pending
    log.close()
