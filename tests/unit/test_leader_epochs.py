"""Leader epochs (Kafka's LeaderEpochFileCache and `leader-epoch-checkpoint`): assignment as
batches arrive, Kafka's endOffsetFor answers, truncation from either end, the file's format,
and rebuilding from the batches when a segment is recovered."""

from __future__ import annotations

import pytest

from seglog.errors import CorruptRecordError
from seglog.storage import Log, LogConfig
from seglog.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCache,
)
from tests.conftest import make_batch


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
        LeaderEpochCache(tmp_path)


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
