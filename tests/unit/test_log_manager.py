import itertools
import json
import threading

import pytest

from seglog.errors import InvalidConfigError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from seglog.storage import LogConfig, ManualClock
from seglog.storage import log as log_module
from seglog.storage.checkpoint import (
    CLEAN_SHUTDOWN_MARKER,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
)
from seglog.storage.config import LogManagerConfig
from seglog.storage.log_manager import LogManager
from tests.batches import make_batch
from tests.waiting import wait_until


def manager(tmp_path, clock=None, dirs=("d0", "d1"), **config):
    cfg = LogManagerConfig(log_dirs=tuple(str(tmp_path / d) for d in dirs), **config)
    return LogManager(cfg, LogConfig(), clock=clock or ManualClock())


def test_logs_are_spread_over_data_dirs_and_reloaded_after_restart(tmp_path):
    clock = ManualClock()
    mgr = manager(tmp_path, clock)
    mgr.startup()
    for p in range(6):
        mgr.create_log("orders", p).append(make_batch([b"v%d" % p], timestamp_ms=clock.now_ms()))
    per_dir = {d: len(list((tmp_path / d).glob("orders-*"))) for d in ("d0", "d1")}
    assert per_dir == {"d0": 3, "d1": 3}
    mgr.shutdown()
    assert (tmp_path / "d0" / CLEAN_SHUTDOWN_MARKER).exists()
    assert (tmp_path / "d1" / CLEAN_SHUTDOWN_MARKER).exists()

    mgr = manager(tmp_path, clock)
    mgr.load_logs()
    assert sorted(mgr.logs()) == [("orders", p) for p in range(6)]
    assert all(log.log_end_offset == 1 for log in mgr.logs().values())
    mgr.shutdown()


def test_start_up_opens_logs_on_several_threads(tmp_path, monkeypatch):
    clock = ManualClock()
    mgr = manager(tmp_path, clock, num_recovery_threads_per_data_dir=2)
    for p in range(8):
        mgr.create_log("t", p)
    mgr.shutdown()

    threads: set[str] = set()
    real_open = log_module.Log.open.__func__
    barrier = threading.Barrier(2, timeout=10)
    calls = itertools.count()

    def recording_open(cls, directory, *args, **kwargs):
        threads.add(threading.current_thread().name)
        # The first two opens meet at the barrier: the first blocks its thread there, so
        # only a second thread can release it (or the barrier times out and breaks). Later
        # opens do not wait: with more workers than two, a third wait could find no partner.
        if next(calls) < 2:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                pass
        return real_open(cls, directory, *args, **kwargs)

    monkeypatch.setattr(log_module.Log, "open", classmethod(recording_open))
    mgr = manager(tmp_path, clock, num_recovery_threads_per_data_dir=2)
    mgr.load_logs()
    assert len(mgr.logs()) == 8
    assert len(threads) >= 2
    assert not barrier.broken
    mgr.shutdown()


def test_topic_overrides_apply_survive_restart_and_bad_ones_are_refused(tmp_path):
    clock = ManualClock()
    mgr = manager(tmp_path, clock)
    log = mgr.create_log("compacted", 0, {"cleanup.policy": "compact", "segment.bytes": 4096})
    assert log.config.compact and log.config.segment_bytes == 4096
    assert mgr.create_log("plain", 0).config == LogConfig()
    with pytest.raises(InvalidConfigError):
        mgr.set_topic_overrides("plain", {"retention.mss": 5})
    with pytest.raises(InvalidConfigError):
        mgr.create_log("bad", 0, {"segment.bytes": -1})
    assert ("bad", 0) not in mgr.logs()
    mgr.shutdown()

    mgr = manager(tmp_path, clock)
    mgr.load_logs()
    assert mgr.get_log("compacted", 0).config.segment_bytes == 4096
    assert mgr.get_log("plain", 0).config == LogConfig()
    mgr.set_topic_overrides("compacted", {"segment.bytes": 8192})
    assert mgr.get_log("compacted", 0).config.segment_bytes == 8192
    mgr.shutdown()


def test_create_get_and_delete(tmp_path):
    mgr = manager(tmp_path, dirs=("d0",))
    mgr.create_log("t", 0)
    assert mgr.create_log("t", 0) is mgr.get_log("t", 0)
    with pytest.raises(TopicAlreadyExistsError):
        mgr.create_log("t", 0, exist_ok=False)
    mgr.delete_log("t", 0)
    assert not (tmp_path / "d0" / "t-0").exists()
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.get_log("t", 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.delete_log("t", 0)
    mgr.shutdown()


def test_scheduler_runs_retention_flush_and_checkpoints_then_stops(tmp_path):
    clock = ManualClock()
    mgr = manager(
        tmp_path,
        clock,
        dirs=("d0",),
        retention_check_interval_ms=1000,
        flush_scheduler_interval_ms=1000,
        flush_recovery_point_interval_ms=1000,
        cleaner_enable=False,
    )
    mgr.startup()
    log = mgr.create_log(
        "old",
        0,
        {
            "retention.ms": 60_000,
            "segment.bytes": 1024,
            "file.delete.delay.ms": 0,
            "flush.ms": 1000,
        },
    )
    for _ in range(6):
        log.append(make_batch([b"x" * 600], timestamp_ms=clock.now_ms()))
    assert len(log.segments) > 3
    assert log.recovery_point == 0

    clock.advance(2_000)  # flush.ms passed: the scheduler flushes and checkpoints
    assert wait_until(lambda: log.recovery_point == log.log_end_offset)
    checkpoint_path = tmp_path / "d0" / RECOVERY_POINT_CHECKPOINT
    assert wait_until(
        lambda: read_checkpoint(checkpoint_path).get(("old", 0)) == log.log_end_offset
    )

    clock.advance(120_000)  # everything is past retention.ms
    assert wait_until(lambda: log.log_start_offset == log.log_end_offset)
    assert len(log.segments) == 1
    mgr.shutdown()
    assert mgr._scheduler is None
    assert (tmp_path / "d0" / CLEAN_SHUTDOWN_MARKER).exists()


def test_scheduler_compacts_logs_with_compact_policy(tmp_path):
    clock = ManualClock()
    mgr = manager(tmp_path, clock, dirs=("d0",), cleaner_backoff_ms=1000)
    mgr.startup()
    log = mgr.create_log("keys", 0, {"cleanup.policy": "compact", "segment.bytes": 1024})
    for i in range(30):
        log.append(make_batch([b"v%d" % i], keys=[b"k%d" % (i % 3)], timestamp_ms=clock.now_ms()))
    size_before = log.size_in_bytes
    clock.advance(5_000)
    assert wait_until(lambda: log.size_in_bytes < size_before / 2)
    mgr.shutdown()


def test_one_failing_log_does_not_stop_maintenance_of_the_others(tmp_path, caplog):
    clock = ManualClock()
    mgr = manager(
        tmp_path, clock, dirs=("d0",), retention_check_interval_ms=1000, cleaner_enable=False
    )
    mgr.startup()
    broken = mgr.create_log("a-broken", 0)
    healthy = mgr.create_log(
        "b-healthy", 0, {"retention.ms": 1000, "segment.bytes": 1024, "file.delete.delay.ms": 0}
    )
    for _ in range(4):
        healthy.append(make_batch([b"x" * 600], timestamp_ms=clock.now_ms()))

    def explode():
        raise OSError("disk gone")

    broken.delete_due_files = explode
    clock.advance(10_000)
    assert wait_until(lambda: healthy.log_start_offset == healthy.log_end_offset)
    assert "disk gone" in caplog.text or wait_until(lambda: "disk gone" in caplog.text)
    mgr.shutdown()


def test_each_manager_owns_its_data_dirs_and_writes_kafkas_clean_shutdown_marker(tmp_path):
    clock = ManualClock()
    (tmp_path / "d0").mkdir()
    # A marker as a Kafka broker writes it: read as a clean shutdown, its epoch kept.
    (tmp_path / "d0" / CLEAN_SHUTDOWN_MARKER).write_text('{"version":0,"brokerEpoch":42}')
    first = manager(tmp_path, clock, dirs=("d0",))
    first.startup()
    assert not (tmp_path / "d0" / CLEAN_SHUTDOWN_MARKER).exists()  # unclean until shutdown
    first.create_log("a", 0).append(make_batch([b"x"], timestamp_ms=clock.now_ms()))
    # A second manager on another directory shares nothing with the first: closing all of
    # its logs marks its own directory alone.
    second = manager(tmp_path, clock, dirs=("d1",))
    second.startup()
    second.create_log("b", 0)
    second.shutdown()
    assert (tmp_path / "d1" / CLEAN_SHUTDOWN_MARKER).exists()
    assert not (tmp_path / "d0" / CLEAN_SHUTDOWN_MARKER).exists()
    # Deleting the last log of a directory mid-run writes no marker: only shutdown does.
    first.delete_log("a", 0)
    assert not (tmp_path / "d0" / CLEAN_SHUTDOWN_MARKER).exists()
    first.shutdown()
    marker = json.loads((tmp_path / "d0" / CLEAN_SHUTDOWN_MARKER).read_text())
    assert marker == {"version": 0, "brokerEpoch": 42}
    assert json.loads((tmp_path / "d1" / CLEAN_SHUTDOWN_MARKER).read_text())["brokerEpoch"] == -1
