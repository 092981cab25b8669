"""The log manager's periodic work on a node of idle partitions: a tick where nothing
changed visits no log and rewrites no checkpoint file, and a retention pass opens no index."""

from __future__ import annotations

import os

from seglog.storage import LogConfig, ManualClock
from seglog.storage.checkpoint import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from seglog.storage.config import LogManagerConfig
from seglog.storage.log_manager import LogManager
from tests.batches import make_batch

IDLE_LOGS = 5000
CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT)


def tick(mgr: LogManager) -> None:
    """Every periodic task once, as the scheduler runs them at their intervals."""
    mgr.flush_dirty_logs()
    mgr.checkpoint_recovery_points()
    mgr.checkpoint_high_watermarks()
    mgr.cleanup_logs()


def file_identities(directory) -> dict[str, tuple[int, int]]:
    """(inode, mtime ns) of each checkpoint file: an atomic rewrite changes the inode."""
    out = {}
    for name in CHECKPOINTS:
        stat = os.stat(directory / name)
        out[name] = (stat.st_ino, stat.st_mtime_ns)
    return out


def test_an_idle_tick_over_5000_logs_visits_none_and_rewrites_no_checkpoint(tmp_path):
    clock = ManualClock()
    config = LogManagerConfig(log_dirs=(str(tmp_path / "d0"),), cleaner_enable=False)
    mgr = LogManager(config, LogConfig(flush_ms=1000), clock=clock)
    try:
        logs = [mgr.create_log("idle", p) for p in range(IDLE_LOGS)]
        busy = logs[7]
        busy.append(make_batch([b"x"], timestamp_ms=clock.now_ms()))
        busy.maybe_increment_high_watermark(busy.log_end_offset)
        clock.advance(2000)
        tick(mgr)  # the first tick writes what creation and the append changed
        assert mgr.logs_flush_checked == 1 and busy.recovery_point == 1
        written = file_identities(tmp_path / "d0")

        visited = mgr.logs_flush_checked
        for _ in range(3):
            clock.advance(2000)
            tick(mgr)
        assert mgr.logs_flush_checked == visited  # no log had anything to flush
        assert file_identities(tmp_path / "d0") == written
        # Retention looked at every log and opened no index (each has one empty segment).
        assert not any(log.active_segment.offset_index.is_loaded for log in logs if log is not busy)

        busy.append(make_batch([b"y"], timestamp_ms=clock.now_ms()))
        busy.maybe_increment_high_watermark(busy.log_end_offset)
        clock.advance(2000)
        tick(mgr)
        assert mgr.logs_flush_checked == visited + 1  # the one log that appended
        after = file_identities(tmp_path / "d0")
        assert all(after[name] != written[name] for name in CHECKPOINTS)
    finally:
        mgr.shutdown()
