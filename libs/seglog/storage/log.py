"""Log: one partition directory `<topic>-<partition>`, a sorted run of segments.

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

Append path (no per-record work): validate every batch of the input (header, lengths, CRC-32C,
count, size, timestamps) before writing a byte; assign offsets by rewriting each batch's
first 16 bytes (baseOffset, batchLength, partitionLeaderEpoch: outside the CRC); write all
batches with one vectored write; add sparse index entries.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import (
    InvalidOffsetError,
    LogClosedError,
    OffsetOutOfRangeError,
)
from ..records.batch import NO_TIMESTAMP
from ..semconv import PARTITION, TOPIC
from ..spans import EngineTracer
from . import log_files, log_reads, segment_reads
from .checkpoint import DataDir
from .clock import SYSTEM_CLOCK, Clock
from .config import LOG_APPEND_TIME, LONG_MAX, LogConfig
from .dirty_logs import DirtyLogs
from .leader_epoch_cache import LeaderEpochCache
from .log_loader import LoadedLogOffsets, load_log
from .log_reads import LogReadResult, LogSlice, ReadPosition, TimestampAndOffset
from .log_segments import LogSegments, SegmentsSnapshot
from .producer_state import ProducerStateManager, producer_batches
from .segment import AppendedBatch, LogSegment
from .segment_factory import SegmentFactory
from .validation import (
    ValidatedRecords,
    assign_offsets,
    validate_follower_records,
    validate_records,
)

tracer = EngineTracer("seglog.storage")

# Kafka's producer.id.expiration.ms: a producer silent this long is forgotten (checked at rolls).
PRODUCER_ID_EXPIRATION_MS = 24 * 60 * 60 * 1000
# ListOffsets' special timestamps, as Kafka's.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # the record with the largest timestamp (KIP-734)


@dataclass(frozen=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the log stamps LogAppendTime
    log_start_offset: int
    batch_count: int
    valid_bytes: int


class Log:
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
        self.directory = directory
        self.topic, self.partition = log_files.parse_topic_partition(directory)
        self._partition_id = str(self.partition)  # spans name partitions as strings
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self._segments = LogSegments()
        self._log_end_offset = 0
        self._log_start_offset = 0
        self._recovery_point = 0
        self._high_watermark = 0
        # (HW offset, its segment, its file position there): where HW-bounded reads stop.
        self._high_watermark_position: tuple[int, LogSegment, int] | None = None
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
        self._closed = False
        self._data_dir = data_dir
        self._owns_data_dir = owns_data_dir
        # The log manager's set of logs its flush task visits; None for a log opened alone.
        self._dirty_logs = dirty_logs
        self.leader_epochs = LeaderEpochCache(directory)
        self.producer_state = ProducerStateManager(directory)

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

    @property
    def segment_factory(self) -> SegmentFactory:
        return SegmentFactory(self.directory, self.config, self.clock)

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

    def _rebuild_producer_state(self) -> None:
        self.producer_state.rebuild(
            self._segments.snapshot(), self._log_start_offset, self._log_end_offset
        )

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

    # -- append ------------------------------------------------------------------------

    def validate(self, records: bytes | bytearray | memoryview) -> ValidatedRecords:
        """Check the whole input against this log's config without writing anything, so a
        caller holding several partitions' inputs can check them all before appending any."""
        with tracer.start_as_current_span("seglog.log.validate") as span:
            validated = validate_records(records, self.config, self.clock.now_ms())
            span.set_attribute("seglog.bytes", len(validated.view))
            span.set_attribute("seglog.batch_count", len(validated.batches))
            return validated

    def append(
        self,
        records: bytes | bytearray | memoryview | ValidatedRecords,
        *,
        leader_epoch: int | None = None,
    ) -> LogAppendInfo:
        """Validate the whole input (unless it comes from `validate`), then append it with
        offsets from the log end offset."""
        with tracer.start_as_current_span("seglog.log.append") as span:
            span.set_attribute(TOPIC, self.topic)
            span.set_attribute(PARTITION, self._partition_id)
            validated = records if isinstance(records, ValidatedRecords) else self.validate(records)
            info = self._append_validated(validated, leader_epoch)
            span.set_attribute("seglog.bytes", info.valid_bytes)
            span.set_attribute("seglog.batch_count", info.batch_count)
            span.set_attribute("seglog.first_offset", info.first_offset)
            span.set_attribute("seglog.last_offset", info.last_offset)
            return info

    def _append_validated(
        self, validated: ValidatedRecords, leader_epoch: int | None
    ) -> LogAppendInfo:
        view, batches, now_ms = validated.view, validated.batches, validated.validated_at_ms
        stamp_ms = now_ms if self.config.message_timestamp_type == LOG_APPEND_TIME else NO_TIMESTAMP
        with self._lock:
            self._check_open()
            first_offset = self._log_end_offset
            idempotent = any(h.producer_id >= 0 for _, h in batches)
            if idempotent:
                duplicate = self.producer_state.check_append(
                    producer_batches((h, 0, 0) for _, h in batches), len(batches)
                )
                if duplicate is not None:  # a retry: answered, not written again
                    return LogAppendInfo(
                        duplicate.first_offset,
                        duplicate.last_offset,
                        duplicate.timestamp_ms,
                        NO_TIMESTAMP,
                        self._log_start_offset,
                        0,
                        0,
                    )
            buffers, appended, max_timestamp = assign_offsets(
                view, batches, first_offset, leader_epoch, stamp_ms
            )
            next_offset = appended[-1].last_offset + 1
            if leader_epoch is not None:  # the node stamps its epoch: one check per append
                self.leader_epochs.assign_from_batches([(leader_epoch, first_offset)])
            else:  # the batches keep theirs
                bases = [first_offset, *(b.last_offset + 1 for b in appended[:-1])]
                self.leader_epochs.assign_from_batches(
                    zip((h.partition_leader_epoch for _, h in batches), bases, strict=True)
                )
            total_bytes = len(view)  # the batches tile the validated input
            segment = self._maybe_roll(total_bytes, max_timestamp, next_offset - 1, now_ms)
            self._write(segment, buffers, appended, first_offset, next_offset)
            if idempotent:
                bases = [first_offset, *(b.last_offset + 1 for b in appended[:-1])]
                self.producer_state.update(
                    producer_batches(
                        (h, base, a.last_offset)
                        for (_, h), base, a in zip(batches, bases, appended, strict=True)
                    )
                )
            return LogAppendInfo(
                first_offset,
                next_offset - 1,
                max_timestamp,
                stamp_ms,
                self._log_start_offset,
                len(appended),
                total_bytes,
            )

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, segment_base_offset: int | None = None
    ) -> LogAppendInfo:
        """Append the leader's batches as they are, offsets, timestamps and epochs kept (Kafka's
        appendAsFollower): nothing is re-encoded, so the bytes on disk are the leader's.
        `segment_base_offset`, the base offset of the leader's segment the bytes were read
        from, rolls a new segment there when it is past the active one, so segment files
        match the leader's one for one."""
        view = memoryview(records).cast("B")
        with self._lock:
            self._check_open()
            batches = validate_follower_records(
                view, self._log_end_offset, gaps_allowed=self.config.compact
            )
            first_offset = batches[0][1].base_offset
            last = batches[-1][1]
            appended = [
                AppendedBatch(h.size_in_bytes, h.last_offset, h.max_timestamp) for _, h in batches
            ]
            max_timestamp = max(b.max_timestamp for b in appended)
            active = self._segments.active
            if (
                segment_base_offset is not None
                and active.base_offset < segment_base_offset <= first_offset
            ):
                self._roll_at(segment_base_offset)
            else:
                self._maybe_roll(len(view), max_timestamp, last.last_offset, self.clock.now_ms())
            self.leader_epochs.assign_from_batches(
                (h.partition_leader_epoch, h.base_offset) for _, h in batches
            )
            self._write(self._segments.active, [view], appended, first_offset, last.next_offset)
            self.producer_state.update(
                producer_batches((h, h.base_offset, h.last_offset) for _, h in batches)
            )
            return LogAppendInfo(
                first_offset,
                last.last_offset,
                max_timestamp,
                NO_TIMESTAMP,
                self._log_start_offset,
                len(batches),
                len(view),
            )

    def _write(
        self,
        segment: LogSegment,
        buffers: Sequence[bytes | bytearray | memoryview],
        appended: Sequence[AppendedBatch],
        first_offset: int,
        next_offset: int,
    ) -> None:
        """The end of every append, leader's or follower's: write, move the log end offset,
        flush when `flush_messages` says so (the lock is held)."""
        segment.append(buffers, appended)
        self._changed_since_flush = self._snapshot_due = True
        self._log_end_offset = next_offset
        self._unflushed_messages += next_offset - first_offset
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        if self._dirty_logs is not None:
            self._dirty_logs.add(self)

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
        self._data_dir.set_high_watermark((self.topic, self.partition), hw)
        return hw

    def _bound_at(self, offset: int, snapshot: SegmentsSnapshot) -> tuple[LogSegment, int]:
        """The segment and file position where a read bounded at `offset` stops (cached for
        the current HW, which moves far less often than reads happen)."""
        cached = self._high_watermark_position
        if cached is not None and cached[0] == offset and snapshot.contains(cached[1]):
            return cached[1], cached[2]
        segment, position = log_reads.position_of(snapshot, offset)
        self._high_watermark_position = (offset, segment, position)
        return segment, position

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: (the largest epoch <= `epoch`, its end)."""
        return self.leader_epochs.end_offset_for(epoch, self._log_end_offset)

    def _maybe_roll(
        self, messages_bytes: int, max_timestamp: int, max_offset: int, now_ms: int
    ) -> LogSegment:
        segment = self._segments.active
        if segment.should_roll(
            messages_bytes=messages_bytes,
            max_timestamp=max_timestamp,
            max_offset=max_offset,
            segment_bytes=self.config.segment_bytes,
            segment_ms=self.config.max_segment_ms,
            now_ms=now_ms,
        ):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (a no-op on an empty one)."""
        with self._lock:
            self._check_open()
            return self._roll_at(self._log_end_offset)

    def _roll_at(self, base_offset: int) -> LogSegment:
        active = self._segments.active
        if active.size == 0 and active.base_offset == base_offset:
            return active
        if active.size == 0:
            # An empty active segment is replaced rather than left between two others.
            active.delete_files()
            self._segments.remove([active])
        else:
            active.on_become_inactive()
        segment = self.segment_factory.open(base_offset)
        self._make_active(segment)
        self._segments.add(segment)
        self._rolled_up_to = segment.base_offset
        self._changed_since_flush = self._snapshot_due = True
        # Kafka's roll: the producer state as of the new segment's base, so a later load
        # replays from here; fsynced with the rolled segment by the scheduled flush.
        self.producer_state.remove_expired(self.clock.now_ms(), PRODUCER_ID_EXPIRATION_MS)
        self.producer_state.take_snapshot(base_offset, sync=False)
        return segment

    # -- read --------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, min_one_message: bool = True
    ) -> bytes | memoryview:
        """Raw bytes (bytes, or a memoryview of them) of whole batches from the batch holding
        `offset`, up to `max_bytes` (at least one batch when `min_one_message`), exactly as
        stored.

        As in Kafka, one read serves one segment: a read that reaches a segment's end returns
        what that segment holds, and the caller continues from the next offset.
        The first batch may start before `offset` (offsets inside a batch are not split)."""
        return self.read_records(offset, max_bytes, min_one_message=min_one_message).data

    def read_records(
        self, offset: int, max_bytes: int, *, min_one_message: bool = True
    ) -> LogReadResult:
        """`read`, with the offset to continue from and the watermarks seen by the read."""
        found = self.locate_records(offset, max_bytes, min_one_message=min_one_message)
        return LogReadResult(
            found.read(), found.next_offset, found.high_watermark, found.log_start_offset
        )

    def locate_records(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one_message: bool = True,
        max_offset: int | None = None,
    ) -> LogSlice:
        """Where `read`'s bytes lie (segment, position, size: Kafka's FetchDataInfo), found
        from the indexes and a few batch headers without reading the batches, so a caller
        can send them from the file or read them once. `max_offset` (a consumer's read: the
        high watermark) bounds the read: nothing at or past it is returned, and a fetch
        offset between it and the log end finds nothing rather than an error, as in Kafka."""
        if offset < 0 or max_bytes < 0:
            raise InvalidOffsetError(f"read at offset {offset} for {max_bytes} bytes: negative")
        log_end = self._log_end_offset
        start = self._log_start_offset
        if offset < start or offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{start}, {log_end}] of {self.directory.name}"
            )
        upper = log_end if max_offset is None else min(max_offset, log_end)
        if offset >= upper:
            return LogSlice(None, offset, upper, start)
        with tracer.start_as_current_span("seglog.log.read") as span:
            span.set_attribute(TOPIC, self.topic)
            span.set_attribute(PARTITION, self._partition_id)
            span.set_attribute("seglog.fetch_offset", offset)
            snapshot = self._segments.snapshot()
            bound: tuple[LogSegment, int] | None = None
            if upper < log_end:
                bound = self._bound_at(upper, snapshot)
            for segment in snapshot.segments[snapshot.floor_index(offset) :]:
                max_position = None
                if bound is not None and segment is bound[0]:
                    max_position = bound[1]
                found = segment_reads.locate(
                    segment,
                    offset,
                    max_bytes,
                    min_one_message=min_one_message,
                    max_position=max_position,
                )
                if found is not None:
                    span.set_attribute("seglog.bytes", found.size)
                    span.set_attribute("seglog.next_offset", found.next_offset)
                    return LogSlice(found, found.next_offset, upper, start)
                if max_position is not None:
                    break  # the bound's segment ends the read
            return LogSlice(None, offset, upper, start)

    def bytes_from(
        self, offset: int, hint: ReadPosition | None = None, *, max_offset: int | None = None
    ) -> ReadPosition:
        """How many bytes lie from the batch holding `offset` to the log end (or to
        `max_offset`, the high watermark of a consumer's read), counted from file positions
        and segment sizes (a waiting fetch's `min_bytes`), never by reading the data.
        `hint`, a result of an earlier call for the same offset, skips the index lookup
        while its segment is still in the log."""
        snapshot = self._segments.snapshot()
        found = log_reads.bytes_from(snapshot, offset, hint)
        if max_offset is None or max_offset >= self._log_end_offset:
            return found
        if max_offset <= offset:
            return ReadPosition(found.segment, found.position, 0)
        bound_segment, bound_position = self._bound_at(max_offset, snapshot)
        past_bound = log_reads.bytes_from(
            snapshot, max_offset, ReadPosition(bound_segment, bound_position, 0)
        ).available_bytes
        return ReadPosition(
            found.segment, found.position, max(found.available_bytes - past_bound, 0)
        )

    def split_points(
        self, start_offset: int, end_offset: int, target_bytes: int
    ) -> tuple[int, int, list[log_reads.Split]]:
        """[start, end) clamped to [log start, high watermark] (an end < 0: the high
        watermark), and that range cut into pieces of about `target_bytes` at batch starts
        (log_reads.split_points): (start, end, pieces)."""
        upper = self._high_watermark
        end = upper if end_offset < 0 else min(end_offset, upper)
        start = min(max(start_offset, self._log_start_offset), end)
        pieces = log_reads.split_points(self._segments.snapshot(), start, end, target_bytes)
        return start, end, pieces

    def offset_for_timestamp(
        self, timestamp_ms: int, *, max_offset: int | None = None
    ) -> TimestampAndOffset | None:
        """The first record whose timestamp >= `timestamp_ms` (Kafka's ListOffsets); also
        LATEST_TIMESTAMP (-1), EARLIEST_TIMESTAMP (-2) and MAX_TIMESTAMP (-3). None when no
        record qualifies. `max_offset` (a consumer's: the high watermark) hides the offsets
        at or past it: LATEST answers it, and a record found past it is not an answer."""
        upper = (
            self._log_end_offset if max_offset is None else min(max_offset, self._log_end_offset)
        )
        if timestamp_ms == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, upper)
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self._log_start_offset)
        snapshot, start = self._segments.snapshot(), self._log_start_offset
        if timestamp_ms == MAX_TIMESTAMP:
            found = log_reads.offset_of_max_timestamp(snapshot, start)
        elif timestamp_ms < 0:
            raise InvalidOffsetError(f"timestamp {timestamp_ms} is neither >= 0, -1, -2 nor -3")
        else:
            found = log_reads.offset_for_timestamp(snapshot, timestamp_ms, start)
        return None if found is None or found.offset >= upper else found

    # -- truncation and deletion -------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= `offset`. Truncation works on whole
        batches: a batch straddling `offset` goes too, and the log end offset becomes the
        offset after the last batch kept (<= `offset`)."""
        if offset < 0:
            raise InvalidOffsetError(f"truncate_to({offset}): negative offset")
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                # Nothing to cut, but an epoch entry may start at the log end: a replica
                # that became leader (which records its epoch's start) and appended nothing
                # before another was elected. Kept, it would make every fetch diverge again
                # (Kafka's truncateTo drops it the same way).
                self.leader_epochs.truncate_from_end(self._log_end_offset)
                return
            if offset <= self._segments.first.base_offset:
                self.truncate_fully_and_start_at(offset)
                return
            self._changed_since_flush = self._snapshot_due = True
            keep = [s for s in self._segments if s.base_offset < offset]
            for segment in self._segments.as_list()[len(keep) :]:
                segment.delete_files()
            self._segments.set(keep)
            active = keep[-1]
            active.truncate_to(offset)
            self._make_active(active)
            self._log_end_offset = active.read_next_offset()
            self.leader_epochs.truncate_from_end(self._log_end_offset)
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            self._high_watermark_position = None
            self._set_high_watermark(self._high_watermark)
            self.producer_state.delete_snapshots_from(self._log_end_offset + 1)
            self._rebuild_producer_state()
            self._update_data_dir()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset` (a follower far behind does this)."""
        if offset < 0:
            raise InvalidOffsetError(f"truncate_fully_and_start_at({offset}): negative offset")
        with self._lock:
            self._check_open()
            self._changed_since_flush = self._snapshot_due = True
            for segment in self._segments:
                segment.delete_files()
            segment = self.segment_factory.open(offset)
            self._make_active(segment)
            self._segments.set([segment])
            self._log_end_offset = self._log_start_offset = self._recovery_point = offset
            self._high_watermark_position = None
            self._set_high_watermark(offset)
            self.leader_epochs.clear()
            self.producer_state.delete_snapshots_from(0)
            self.producer_state.clear()
            self._update_data_dir()

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset forward (Kafka's DeleteRecords); whole segments below it
        are removed by the next retention pass. Returns the new log start offset."""
        with self._lock:
            self._check_open()
            if offset < 0 or offset > self._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: log ends at {self._log_end_offset}"
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._set_high_watermark(self._high_watermark)
                self.leader_epochs.truncate_from_start(offset)
                self._update_data_dir()
            return self._log_start_offset

    def delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        """Take segments out of the log now; their files go after `file_delete_delay_ms`."""
        with self._lock:
            self._check_open()
            self._changed_since_flush = self._snapshot_due = True
            doomed_ids = {id(s) for s in doomed}
            if len(doomed_ids) >= len(self._segments):
                self.roll()
            self._segments.remove(doomed)
            keep = self._segments.as_list()
            for segment in doomed:
                segment.change_suffix("", log_files.DELETED_SUFFIX)
            self.schedule_delete(doomed)
            self._log_start_offset = max(self._log_start_offset, keep[0].base_offset)
            self._set_high_watermark(self._high_watermark)
            self.producer_state.delete_snapshots_below(self._log_start_offset)
            self.leader_epochs.truncate_from_start(self._log_start_offset)
            self._update_data_dir()
        self.delete_due_files()

    def schedule_delete(self, segments: Sequence[LogSegment]) -> None:
        """Files already renamed to `.deleted` go after `file_delete_delay_ms`."""
        due_ms = self.clock.now_ms() + self.config.file_delete_delay_ms
        with self._lock:
            self._pending_deletes.extend((due_ms, s) for s in segments)

    def delete_due_files(self) -> None:
        now = self.clock.now_ms()
        with self._lock:
            due = [s for t, s in self._pending_deletes if t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
        for segment in due:
            segment.delete_files()

    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> None:
        """Swap cleaned segments in for the ones they replace (the cleaner's last step). The
        new segments are `.swap` files on entry. The old ones are renamed to `.deleted`
        (readers holding them keep reading; the files go after `file_delete_delay_ms`) before
        the swap files take their final names, so a crash in between leaves a `.swap` that the
        next load finishes (log_loader)."""
        with self._lock:
            self._check_open()
            self._changed_since_flush = self._snapshot_due = True
            self._segments.replace(new_segments, old_segments)
            for segment in old_segments:
                segment.change_suffix("", log_files.DELETED_SUFFIX)
            self.schedule_delete(old_segments)
            for segment in new_segments:
                segment.change_suffix(log_files.SWAP_SUFFIX, "")
            log_files.fsync_directory(self.directory)

    # -- flush, close ------------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment holding unflushed offsets and advance the recovery point."""
        with self._lock, tracer.start_as_current_span("seglog.log.flush") as span:
            self._check_open()
            span.set_attribute(TOPIC, self.topic)
            span.set_attribute(PARTITION, self._partition_id)
            target = self._log_end_offset
            if self._changed_since_flush:
                snapshot = self._segments.snapshot()
                for i, segment in enumerate(snapshot.segments):
                    upper = snapshot.upper_bound_of(i)
                    if upper is None or upper > self._recovery_point:
                        segment.flush()
                self.leader_epochs.sync()  # a new log's first epoch entry, written unsynced
                log_files.fsync_directory(self.directory)
                self._changed_since_flush = False
            self._recovery_point = target
            self._unflushed_messages = 0
            self._last_flush_ms = self.clock.now_ms()
            self._update_data_dir()

    def flush_up_to(self, offset: int) -> None:
        """fsync the segments wholly below `offset` and move the recovery point there, so a
        crash rescans only what follows (Kafka's flush of a rolled segment)."""
        with self._lock:
            self._check_open()
            if offset <= self._recovery_point:
                return
            snapshot = self._segments.snapshot()
            for i, segment in enumerate(snapshot.segments):
                upper = snapshot.upper_bound_of(i)
                if upper is None or upper > offset:
                    break
                if upper > self._recovery_point:
                    segment.flush()
            self.leader_epochs.sync()
            log_files.fsync_directory(self.directory)
            self._recovery_point = offset
            self._update_data_dir()

    def maybe_flush(self) -> bool:
        """Driven by the log manager's scheduler: the flush a roll asked for (its rolled
        segments), then the time-based policy (`flush_ms`). True while a time-based flush
        may still come due without another append (the scheduler keeps visiting); with
        Kafka's default flush_ms (never) an appended log needs one visit, for its rolls."""
        if self._closed:
            return False
        if self._rolled_up_to > self._recovery_point:
            self.flush_up_to(self._rolled_up_to)
        if (
            self._unflushed_messages
            and self.clock.now_ms() - self._last_flush_ms >= self.config.flush_ms
        ):
            self.flush()
        return bool(self._unflushed_messages) and self.config.flush_ms < LONG_MAX

    def _update_data_dir(self) -> None:
        self._data_dir.update(
            (self.topic, self.partition),
            recovery_point=self._recovery_point,
            log_start_offset=self._log_start_offset,
        )

    def checkpoint(self) -> None:
        self._data_dir.checkpoint()

    def close(self) -> None:
        """Flush, trim the indexes and mark this log cleanly closed."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            # An unchanged log keeps the snapshot its last close wrote; one missing is
            # written so the next load does not rebuild the state from every batch.
            end = self._log_end_offset
            if self._snapshot_due or (
                end > self._log_start_offset and not self.producer_state.snapshot_path(end).exists()
            ):
                self.producer_state.take_snapshot(self._log_end_offset)
                self._snapshot_due = False
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletes:
                segment.delete_files()
            self._pending_deletes = []
            self._closed = True
        self._data_dir.closed((self.topic, self.partition), clean=True)
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

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "Log",
    "LogAppendInfo",
    "LogSlice",
    "TimestampAndOffset",
]
