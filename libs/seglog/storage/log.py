"""Log: one partition directory `<topic>-<partition>`, a sorted run of segments.

`Log` is the one class callers use; its methods are grouped by job in the modules it is made
of, each documenting its part:

- log_state.py: the fields, the offsets and watermarks (named and defined there) and the
  high watermark's rules;
- log_flushing.py: fsync, the recovery point and the flush policies;
- log_appending.py: the leader's and the follower's append, and segment rolls;
- log_reading.py: fetch reads and ListOffsets' lookups;
- log_deletion.py: truncation, the log start offset, segment deletion and the cleaner's swap;
- log_loader.py: opening, and recovery after an unclean shutdown;
- here: closing and deleting.

`Log` holds one object of each part, and one `LogState` they all share, so every method
works on the same fields under the same lock, as one class did before the split. A part is
given the parts it calls (appending flushes, deletion rolls) and nothing else; `Log`'s own
methods only hand each call to its part.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..records.control import ControlMarker
from . import log_reads
from .checkpoint import DataDir
from .clock import SYSTEM_CLOCK, Clock
from .config import LogConfig
from .dirty_logs import DirtyLogs
from .leader_epoch_cache import EpochEntry, LeaderEpochCache
from .log_appending import LogAppendInfo, LogAppending
from .log_deletion import LogDeletion
from .log_flushing import LogFlushing
from .log_loader import open_state
from .log_reading import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, LogReading
from .log_reads import LogReadResult, LogSlice, ReadPosition, TimestampAndOffset
from .log_state import LogState
from .producer_state import ActiveProducer, ProducerStateManager
from .segment import LogSegment
from .segment_factory import SegmentFactory
from .txn_index import AbortedTxn
from .validation import ValidatedRecords

logger = logging.getLogger(__name__)


class Log:
    """One partition's log, composed of the parts named in this module's docstring. They
    share one `LogState` (its fields and lock); the methods below hand each call to the part
    whose job it is."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        data_dir: DataDir,
        *,
        owns_data_dir: bool,
        dirty_logs: DirtyLogs | None = None,
    ) -> None:
        self._state = LogState(
            directory,
            config,
            clock,
            data_dir,
            owns_data_dir=owns_data_dir,
            dirty_logs=dirty_logs,
            owner=self,
        )
        self._flushing = LogFlushing(self._state)
        self._appending = LogAppending(self._state, self._flushing)
        self._reading = LogReading(self._state)
        self._deletion = LogDeletion(self._state, self._appending)

    # -- the log's identity and the parts it shares --------------------------------------

    @property
    def directory(self) -> Path:
        return self._state.directory

    @property
    def topic(self) -> str:
        return self._state.topic

    @property
    def partition(self) -> int:
        return self._state.partition

    @property
    def config(self) -> LogConfig:
        return self._state.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A topic's config changed (the log manager's dynamic update)."""
        self._state.config = config

    @property
    def clock(self) -> Clock:
        return self._state.clock

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        return self._state.leader_epochs

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._state.producer_state

    @property
    def highest_offset_in_remote_storage(self) -> int:
        return self._state.highest_offset_in_remote_storage

    @highest_offset_in_remote_storage.setter
    def highest_offset_in_remote_storage(self, offset: int) -> None:
        """Kept current by the node's remote log manager (tiered storage)."""
        self._state.highest_offset_in_remote_storage = offset

    def __repr__(self) -> str:
        return repr(self._state)

    # -- log_state.py ----------------------------------------------------------

    @property
    def segment_factory(self) -> SegmentFactory:
        return self._state.segment_factory

    @property
    def log_start_offset(self) -> int:
        return self._state.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._state.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._state.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self._state.last_stable_offset

    @property
    def recovery_point(self) -> int:
        return self._state.recovery_point

    @property
    def segments(self) -> list[LogSegment]:
        return self._state.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._state.active_segment

    @property
    def size_in_bytes(self) -> int:
        return self._state.size_in_bytes

    @property
    def cleaned_up_to_offset(self) -> int:
        return self._state.cleaned_up_to_offset

    def set_cleaned_up_to(self, offset: int) -> None:
        self._state.set_cleaned_up_to(offset)

    def update_high_watermark(self, offset: int) -> int:
        return self._state.update_high_watermark(offset)

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        return self._state.maybe_increment_high_watermark(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._state.end_offset_for_epoch(epoch)

    def checkpoint(self) -> None:
        self._state.checkpoint()

    # -- log_flushing.py -------------------------------------------------------

    def flush(self) -> None:
        self._flushing.flush()

    def flush_up_to(self, offset: int) -> None:
        self._flushing.flush_up_to(offset)

    def maybe_flush(self) -> bool:
        return self._flushing.maybe_flush()

    # -- log_appending.py ------------------------------------------------------

    def validate(
        self, records: bytes | bytearray | memoryview, *, client: bool = False
    ) -> ValidatedRecords:
        return self._appending.validate(records, client=client)

    def append(
        self,
        records: bytes | bytearray | memoryview | ValidatedRecords,
        *,
        leader_epoch: int | None = None,
    ) -> LogAppendInfo:
        return self._appending.append(records, leader_epoch=leader_epoch)

    def append_marker(
        self, producer_id: int, producer_epoch: int, marker: ControlMarker, *, leader_epoch: int
    ) -> LogAppendInfo:
        return self._appending.append_marker(
            producer_id, producer_epoch, marker, leader_epoch=leader_epoch
        )

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, segment_base_offset: int | None = None
    ) -> LogAppendInfo:
        return self._appending.append_as_follower(records, segment_base_offset=segment_base_offset)

    def roll(self) -> LogSegment:
        return self._appending.roll()

    # -- log_reading.py --------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, min_one_message: bool = True
    ) -> bytes | memoryview:
        return self._reading.read(offset, max_bytes, min_one_message=min_one_message)

    def read_records(
        self, offset: int, max_bytes: int, *, min_one_message: bool = True
    ) -> LogReadResult:
        return self._reading.read_records(offset, max_bytes, min_one_message=min_one_message)

    def locate_records(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_message: bool = True,
        max_offset: int | None = None,
    ) -> LogSlice:
        return self._reading.locate_records(
            offset, max_bytes, min_one_message=min_one_message, max_offset=max_offset
        )

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        return self._reading.aborted_transactions(start, end)

    def bytes_from(
        self, offset: int, hint: ReadPosition | None = None, *, max_offset: int | None = None
    ) -> ReadPosition:
        return self._reading.bytes_from(offset, hint, max_offset=max_offset)

    def split_points(
        self, start_offset: int, end_offset: int, target_bytes: int
    ) -> tuple[int, int, list[log_reads.Split]]:
        return self._reading.split_points(start_offset, end_offset, target_bytes)

    def offset_for_timestamp(
        self, timestamp_ms: int, *, max_offset: int | None = None
    ) -> TimestampAndOffset | None:
        return self._reading.offset_for_timestamp(timestamp_ms, max_offset=max_offset)

    # -- log_deletion.py -------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        self._deletion.truncate_to(offset)

    def truncate_fully_and_start_at(
        self,
        offset: int,
        *,
        epochs: Sequence[EpochEntry] = (),
        producer_snapshot: bytes | None = None,
    ) -> None:
        self._deletion.truncate_fully_and_start_at(
            offset, epochs=epochs, producer_snapshot=producer_snapshot
        )

    def delete_records_before(self, offset: int) -> int:
        return self._deletion.delete_records_before(offset)

    def delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        self._deletion.delete_segments(doomed)

    def schedule_delete(self, segments: Sequence[LogSegment]) -> None:
        self._deletion.schedule_delete(segments)

    def delete_due_files(self) -> None:
        self._deletion.delete_due_files()

    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> None:
        self._deletion.replace_segments(new_segments, old_segments)

    # -- opening, recovery, closing ---------------------------------------------------------

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
        log._state._data_dir.opened(tp)
        try:
            open_state(log._state, created=created)
        except BaseException:
            log._state._data_dir.closed(tp, clean=False)
            raise
        return log

    def active_producers(self) -> list[ActiveProducer]:
        """The idempotent producers' state (Kafka's DescribeProducers), read under the lock
        appends update it under."""
        state = self._state
        with state._lock:
            return state.producer_state.active_producers()

    def close(self) -> None:
        """Flush, trim the indexes and mark this log cleanly closed."""
        state = self._state
        with state._lock:
            if state._closed:
                return
            self._flushing.flush()
            # An unchanged log keeps the snapshot its last close wrote; one missing is
            # written so the next load does not rebuild the state from every batch.
            end = state._log_end_offset
            clean = True
            if state._snapshot_due or (
                end > state._log_start_offset
                and not state.producer_state.snapshot_path(end).exists()
            ):
                try:
                    state.producer_state.take_snapshot(state._log_end_offset)
                    state._snapshot_due = False
                except OSError as exc:
                    # A full disk: the next load rebuilds the state from the batches (always
                    # safe), so closing goes on, but not as a clean shutdown.
                    logger.error("%s: producer snapshot not written (%s)", state.directory, exc)
                    clean = False
            for segment in state._segments:
                segment.close()
            for _, segment in state._pending_deletes:
                segment.delete_files()
            state._pending_deletes = []
            state._closed = True
        state._data_dir.closed((state.topic, state.partition), clean=clean)
        if state._owns_data_dir:
            state._data_dir.close()

    def delete(self) -> None:
        """Remove the whole partition directory."""
        state = self._state
        with state._lock:
            for segment in state._segments:
                segment.delete_files()
            state._closed = True
        state._data_dir.forget((state.topic, state.partition))
        state._data_dir.closed((state.topic, state.partition), clean=True)
        if state._owns_data_dir:
            state._data_dir.close()
        shutil.rmtree(state.directory, ignore_errors=True)


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "Log",
    "LogAppendInfo",
    "LogSlice",
    "TimestampAndOffset",
]
