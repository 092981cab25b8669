"""LogState: what a log keeps between calls, and the watermarks' rules.

Offsets and watermarks, each named once:

- log start offset: the first offset a reader may fetch (moves forward with retention and
  `delete_records_before`; may sit inside the first segment).
- log end offset (LEO): the offset the next appended record receives.
- recovery point: every offset below it is fsynced; segments from the one holding it onward
  are scanned and rebuilt after an unclean shutdown.
- high watermark (HW): every offset below it is on every in-sync replica, so consumers read
  only below it. Whoever owns the partition's replication moves it (a lone replica: to the
  log end on each append); the log keeps it within [log start, LEO] across truncation and
  checkpoints it in `replication-offset-checkpoint`. A read bounded by it stops at the HW's
  file position, which is a batch boundary (replicas copy whole batches).

One `LogState` per `Log` (log.py), shared by the parts the log is composed of
(log_flushing, log_appending, log_reading, log_deletion): they work on the fields set up here,
under its one lock, so the log behaves as one object while each part keeps one job.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

from ..errors import LogClosedError
from ..spans import EngineTracer
from . import log_files
from .checkpoint import DataDir
from .clock import Clock
from .config import LogConfig
from .dirty_logs import DirtyLogs, Flushable
from .leader_epoch_cache import LeaderEpochCache
from .log_segments import LogSegments
from .producer_state import ProducerStateManager
from .segment import LogSegment
from .segment_factory import SegmentFactory

tracer = EngineTracer("seglog.storage")


class LogState:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        data_dir: DataDir,
        *,
        owns_data_dir: bool,
        dirty_logs: DirtyLogs | None = None,
        owner: Flushable | None = None,
    ) -> None:
        self.directory = directory
        self.topic, self.partition = log_files.parse_topic_partition(directory)
        self._partition_id = str(self.partition)  # spans name partitions as strings
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self._segments = LogSegments()
        self._log_end_offset = 0
        self._log_start_offset = 0
        # Tiered storage (KIP-405): the last offset the object store holds, as its metadata
        # says (-1: none). Local retention of a tiered log deletes only segments at or below
        # it (retention.py); the node's remote log manager keeps it current.
        self.highest_offset_in_remote_storage = -1
        self._recovery_point = 0
        self._high_watermark = 0
        # (HW offset, its segment, its file position there): where HW-bounded reads stop.
        self._high_watermark_position: tuple[int, LogSegment, int] | None = None
        # (log end offset, its segment, its file position there), kept by each append.
        self._log_end_position: tuple[int, LogSegment, int] | None = None
        self._unflushed_messages = 0
        self._last_flush_ms = clock.now_ms()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # Offsets below this sit in rolled segments waiting for the scheduled flush that
        # Kafka runs after a roll (off the append path): then the recovery point moves here.
        self._rolled_up_to = 0
        # Files changed since the last flush (appends, rolls, truncations, deletions): an
        # unchanged log's flush and close cost no fsync (a node of 10,000 idle partitions
        # shut down in 4 fsyncs each, ~45 s here, before this).
        self._changed_since_flush = False
        # The producer-state snapshot at the log end is out of date (or missing).
        self._snapshot_due = False
        # The last append failed on the disk (full, read-only) and none has succeeded since:
        # a producer's next batch then misses the failed one's sequence (log_appending.py).
        self._write_failed = False
        self._closed = False
        self._data_dir = data_dir
        self._owns_data_dir = owns_data_dir
        # The log manager's set of logs its flush task visits; None for a log opened alone.
        self._dirty_logs = dirty_logs
        # What the flush task visits: the Log this state belongs to. Held weakly, so a
        # removed partition's log is freed by its reference count alone, without a cycle.
        self._owner = None if owner is None else weakref.ref(owner)
        self.leader_epochs = LeaderEpochCache(directory)
        self.producer_state = ProducerStateManager(directory)

    @property
    def segment_factory(self) -> SegmentFactory:
        return SegmentFactory(self.directory, self.config, self.clock)

    def _rebuild_producer_state(self) -> None:
        with self.producer_state.txns.rebuilding():
            self.producer_state.rebuild(
                self._segments.snapshot(), self._log_start_offset, self._log_end_offset
            )
            # Replayed markers below the HW are replicated: their transactions are stable.
            self.producer_state.txns.on_high_watermark(self._high_watermark)

    def mark_dirty(self) -> None:
        """An append changed the log: the log manager's flush task must visit it."""
        owner = None if self._owner is None else self._owner()
        if self._dirty_logs is not None and owner is not None:
            self._dirty_logs.add(owner)

    def _make_active(self, segment: LogSegment) -> None:
        segment.make_active()

    # -- public facts ------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: min(the first offset of the oldest unstable transaction, the HW)
        (txn_state.py); read without the lock, as the HW is."""
        txns = self.producer_state.txns
        return txns.last_stable_offset(self._high_watermark, self._log_start_offset)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> list[LogSegment]:
        return self._segments.as_list()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def size_in_bytes(self) -> int:
        return self._segments.size_in_bytes

    @property
    def cleaned_up_to_offset(self) -> int:
        """Offsets below this were compacted by the cleaner (Kafka's cleaner-offset-checkpoint,
        kept across restarts in the data dir)."""
        return self._data_dir.cleaner_offsets.get((self.topic, self.partition), 0)

    def set_cleaned_up_to(self, offset: int) -> None:
        self._data_dir.set_cleaner_offset((self.topic, self.partition), offset)

    # -- high watermark ------------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW (clamped to [log start, LEO]): a follower takes its leader's this way.
        Returns the HW set."""
        with self._lock:
            return self._set_high_watermark(offset)

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the HW forward to `offset` (clamped), never back: the leader's rule. True
        when it moved."""
        with self._lock:
            if offset <= self._high_watermark:
                return False
            before = self._high_watermark
            return self._set_high_watermark(offset) != before

    def _set_high_watermark(self, offset: int) -> int:
        hw = min(max(offset, self._log_start_offset), self._log_end_offset)
        self._high_watermark = hw
        self.producer_state.txns.on_high_watermark(hw)
        self._data_dir.set_high_watermark((self.topic, self.partition), hw)
        return hw

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: (the largest epoch <= `epoch`, its end)."""
        return self.leader_epochs.end_offset_for(epoch, self._log_end_offset)

    # -- the data dir's checkpoints, and the rest --------------------------------------

    def _update_data_dir(self) -> None:
        self._data_dir.update(
            (self.topic, self.partition),
            recovery_point=self._recovery_point,
            log_start_offset=self._log_start_offset,
        )

    def checkpoint(self) -> None:
        self._data_dir.checkpoint()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )
