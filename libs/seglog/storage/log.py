"""Log: one partition directory `<topic>-<partition>`, a sorted run of segments.

`Log` is the one class callers use; its methods are grouped by job in the modules it is made
of, each documenting its part:

- log_state.py: the fields, the offsets and watermarks (named and defined there) and the
  high watermark's rules;
- log_flushing.py: fsync, the recovery point and the flush policies;
- log_appending.py: the leader's and the follower's append, and segment rolls;
- log_reading.py: fetch reads and ListOffsets' lookups;
- log_deletion.py: truncation, the log start offset, segment deletion and the cleaner's swap;
- here: opening (recovery after an unclean shutdown: log_loader.py), closing and deleting.

The parts are base classes of `Log` rather than objects it holds, so every method works on
the same fields under the same lock, as one class did before the split; each part derives
from the ones it calls (appending flushes, deletion rolls), and all from LogState.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .checkpoint import DataDir
from .clock import SYSTEM_CLOCK, Clock
from .config import LogConfig
from .dirty_logs import DirtyLogs
from .log_appending import LogAppendInfo
from .log_deletion import LogDeletion
from .log_loader import LoadedLogOffsets, load_log
from .log_reading import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, LogReading
from .log_reads import LogSlice, TimestampAndOffset
from .producer_state import ActiveProducer

logger = logging.getLogger(__name__)


class Log(LogDeletion, LogReading):
    # -- opening and recovery ----------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: LogConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        data_dir: DataDir | None = None,
        dirty_logs: DirtyLogs | None = None,
    ) -> Log:
        """Open (or create) the log, recovering whatever an unclean shutdown left behind.
        `data_dir` is the LogManager's object for the parent directory; without one the log
        owns its parent directory's checkpoints alone. Appends add the log to `dirty_logs`
        (the LogManager's flush task visits only those)."""
        directory = Path(directory)
        try:
            directory.mkdir(parents=True)
            created = True
        except FileExistsError:
            if not directory.is_dir():
                raise  # a file in the way: the partition cannot be created (goes offline)
            created = False
        owns = data_dir is None
        log = cls(
            directory,
            config or LogConfig(),
            clock,
            DataDir(directory.parent) if data_dir is None else data_dir,
            owns_data_dir=owns,
            dirty_logs=dirty_logs,
        )
        tp = (log.topic, log.partition)
        log._data_dir.opened(tp)
        try:
            log._load(created=created)
        except BaseException:
            log._data_dir.closed(tp, clean=False)
            raise
        return log

    def _load(self, *, created: bool = False) -> None:
        tp = (self.topic, self.partition)
        checkpointed_start = self._data_dir.log_start_offsets.get(tp, 0)
        recovery_point = (
            None if self._data_dir.clean_shutdown else self._data_dir.recovery_points.get(tp, 0)
        )
        loaded = (
            LoadedLogOffsets()  # a directory made just now holds nothing to load or clean
            if created
            else load_log(self.segment_factory, recovery_point, self.leader_epochs)
        )
        # A new log is empty: until it changes, losing its files loses nothing. One loaded
        # after a crash, or recovered here, has changes to make durable.
        self._changed_since_flush = self._snapshot_due = bool(loaded.segments) and (
            recovery_point is not None or loaded.recovered
        )
        if not loaded.segments:
            start = max(checkpointed_start, 0)
            loaded.segments = [self.segment_factory.open(start)]
            loaded.log_end_offset = start
        self._segments.set(loaded.segments)
        self._log_end_offset = loaded.log_end_offset
        self._log_start_offset = min(
            max(checkpointed_start, self._segments.first.base_offset), self._log_end_offset
        )
        self._recovery_point = (
            self._log_end_offset
            if recovery_point is None
            else min(max(recovery_point, loaded.recovered_up_to), self._log_end_offset)
        )
        self.leader_epochs.truncate_from_start(self._log_start_offset)
        self._set_high_watermark(self._data_dir.high_watermarks.get(tp, 0))
        if not created:  # a directory made just now holds no snapshot and no batch to replay
            self._rebuild_producer_state()
        for segment in self._segments.as_list()[:-1]:
            segment.on_become_inactive()
            segment.release_indexes()  # loaded by the checks above; idle until read
        # The active segment's indexes too wait for their first use: an idle partition keeps
        # no mapping (a node has vm.max_map_count, 65530 by default, of them).
        self._segments.active.release_indexes()
        self._make_active(self._segments.active)
        self._update_data_dir()

    def active_producers(self) -> list[ActiveProducer]:
        """The idempotent producers' state (Kafka's DescribeProducers), read under the lock
        appends update it under."""
        with self._lock:
            return self.producer_state.active_producers()

    def close(self) -> None:
        """Flush, trim the indexes and mark this log cleanly closed."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            # An unchanged log keeps the snapshot its last close wrote; one missing is
            # written so the next load does not rebuild the state from every batch.
            end = self._log_end_offset
            clean = True
            if self._snapshot_due or (
                end > self._log_start_offset and not self.producer_state.snapshot_path(end).exists()
            ):
                try:
                    self.producer_state.take_snapshot(self._log_end_offset)
                    self._snapshot_due = False
                except OSError as exc:
                    # A full disk: the next load rebuilds the state from the batches (always
                    # safe), so closing goes on, but not as a clean shutdown.
                    logger.error("%s: producer snapshot not written (%s)", self.directory, exc)
                    clean = False
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletes:
                segment.delete_files()
            self._pending_deletes = []
            self._closed = True
        self._data_dir.closed((self.topic, self.partition), clean=clean)
        if self._owns_data_dir:
            self._data_dir.close()

    def delete(self) -> None:
        """Remove the whole partition directory."""
        import shutil

        with self._lock:
            for segment in self._segments:
                segment.delete_files()
            self._closed = True
        self._data_dir.forget((self.topic, self.partition))
        self._data_dir.closed((self.topic, self.partition), clean=True)
        if self._owns_data_dir:
            self._data_dir.close()
        shutil.rmtree(self.directory, ignore_errors=True)


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "Log",
    "LogAppendInfo",
    "LogSlice",
    "TimestampAndOffset",
]
