"""Storage faults the engine contains: a failed index write, rolls that flush, torn tails
under a clean-shutdown marker, and index entries that point inside a batch."""

from __future__ import annotations

import os

import pytest

from seglog.errors import StorageError
from seglog.records import iter_records
from seglog.storage import Log, LogConfig
from tests.batches import make_batch


def _values(log: Log) -> list[bytes]:
    return [r.value for r in iter_records(log.read(log.log_start_offset, 1 << 30))]


def test_a_failed_index_write_rolls_the_append_back_and_later_appends_work(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    log.append(make_batch([b"a"]))
    log.append(make_batch([b"b"]))
    segment = log.active_segment
    size_before, entries_before = segment.size, segment.offset_index.entries
    index_fd = segment.offset_index._fd
    saved = os.dup(index_fd)
    read_only = os.open(tmp_path / "read-only", os.O_RDONLY | os.O_CREAT, 0o644)
    os.dup2(read_only, index_fd)  # every pwrite to the index now fails with EBADF
    try:
        with pytest.raises(StorageError, match="rolled back") as caught:
            log.append(make_batch([b"lost"]))
        assert caught.value.retriable
        assert (segment.size, segment.offset_index.entries) == (size_before, entries_before)
        assert log.log_end_offset == 2
    finally:
        os.dup2(saved, index_fd)
        os.close(saved)
        os.close(read_only)
    assert log.append(make_batch([b"c"])).first_offset == 2
    assert _values(log) == [b"a", b"b", b"c"]
    log.close()
    reopened = Log.open(tmp_path / "t-0")
    try:
        assert _values(reopened) == [b"a", b"b", b"c"]  # nothing of the failed append
    finally:
        reopened.close()


def test_a_roll_leaves_the_flush_to_the_scheduler_which_advances_the_recovery_point(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2048))
    try:
        for _ in range(9):
            log.append(make_batch([bytes(500)]))
        assert len(log.segments) >= 3
        # The append path did not flush: the rolled segments wait for the scheduled task.
        assert log.recovery_point == 0
        log.maybe_flush()  # what LogManager's flush scheduler runs every interval
        assert log.recovery_point == log.active_segment.base_offset > 0
        log.append(make_batch([bytes(500)]))
        log.maybe_flush()
        assert log.recovery_point == log.active_segment.base_offset
    finally:
        log.close()


def test_a_clean_shutdown_marker_does_not_hide_a_torn_tail(tmp_path):
    log = Log.open(tmp_path / "t-0")
    for value in (b"a", b"b", b"c"):
        log.append(make_batch([value]))
    path = log.active_segment.log.path
    log.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    whole = path.stat().st_size
    with open(path, "ab") as tail:
        tail.write(make_batch([b"torn"])[:30])  # a partial batch after the marker was written
    reopened = Log.open(tmp_path / "t-0")
    try:
        assert path.stat().st_size == whole
        assert _values(reopened) == [b"a", b"b", b"c"] and reopened.log_end_offset == 3
        assert reopened.append(make_batch([b"d"])).first_offset == 3
    finally:
        reopened.close()


def test_an_index_entry_pointing_inside_a_batch_is_detected_and_rebuilt(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    for i in range(6):
        log.append(make_batch([b"%d" % i * 100]))
    index_path = log.active_segment.offset_index.path
    log.close()
    raw = bytearray(index_path.read_bytes())
    assert len(raw) >= 16
    last = len(raw) - 8
    position = int.from_bytes(raw[last + 4 : last + 8], "big")
    raw[last + 4 : last + 8] = (position + 7).to_bytes(4, "big")  # inside its batch
    index_path.write_bytes(bytes(raw))
    reopened = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    try:
        entry = reopened.active_segment.offset_index.entry(
            reopened.active_segment.offset_index.entries - 1
        )
        assert entry.position == position  # rebuilt from the log
        assert [r.offset for r in iter_records(reopened.read(5, 1 << 20))][-1] == 5
    finally:
        reopened.close()


@pytest.mark.parametrize("as_follower", [False, True], ids=["leader", "follower"])
def test_a_failed_append_leaves_no_epoch_its_batches_would_have_started(tmp_path, as_follower):
    """A replica names its last epoch when it fetches; an epoch recorded for an append that
    was rolled back would let a leader take a log of another history for its own."""
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    for value in (b"a", b"b"):
        log.append(make_batch([value]), leader_epoch=3)
    assert log.leader_epochs.entries == [(3, 0)]
    if as_follower:
        leader = Log.open(tmp_path / "leader-0", LogConfig())
        for value, epoch in ((b"a", 3), (b"b", 3), (b"c", 5)):
            leader.append(make_batch([value]), leader_epoch=epoch)
        newer_epoch = bytes(leader.read(2, 1 << 20))
    segment = log.active_segment
    index_fd = segment.offset_index._fd
    saved = os.dup(index_fd)
    read_only = os.open(tmp_path / "read-only", os.O_RDONLY | os.O_CREAT, 0o644)
    os.dup2(read_only, index_fd)  # every pwrite to the index now fails with EBADF
    try:
        with pytest.raises(StorageError, match="rolled back"):
            if as_follower:
                log.append_as_follower(newer_epoch)
            else:
                log.append(make_batch([b"c"]), leader_epoch=5)
    finally:
        os.dup2(saved, index_fd)
        os.close(saved)
        os.close(read_only)
    assert log.log_end_offset == 2
    assert log.leader_epochs.entries == [(3, 0)]
    assert log.leader_epochs.end_offset_for(5, log.log_end_offset) == (-1, -1)
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    assert reopened.leader_epochs.entries == [(3, 0)]
