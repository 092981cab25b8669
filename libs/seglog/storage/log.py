"""Log: one partition directory `<topic>-<partition>`, a sorted run of segments.

Offsets and watermarks, each named once:

- log start offset: the first offset a reader may fetch (moves forward with retention and
  `delete_records_before`; may sit inside the first segment).
- log end offset (LEO): the offset the next appended record receives.
- recovery point: every offset below it is fsynced; segments from the one holding it onward
  are scanned and rebuilt after an unclean shutdown.

Append path (no per-record work): validate every batch of the input (header, lengths, CRC-32C,
count, size, timestamps) before writing a byte; assign offsets by rewriting each batch's
first 16 bytes (baseOffset, batchLength, partitionLeaderEpoch: outside the CRC); write all
batches with one vectored write; add sparse index entries.
"""

from __future__ import annotations

import bisect
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
from ..spans import EngineTracer
from . import log_files
from .checkpoint import DataDir
from .clock import SYSTEM_CLOCK, Clock
from .config import LOG_APPEND_TIME, LogConfig
from .segment import LogSegment
from .validation import ValidatedRecords, assign_offsets, validate_records

tracer = EngineTracer("seglog.storage")

# ListOffsets' special timestamps, as Kafka's.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
# The first 16 bytes of a batch are rewritten on append: baseOffset, batchLength,
# partitionLeaderEpoch. The CRC starts at byte 21, so none of them are covered by it.


@dataclass(frozen=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the log stamps LogAppendTime
    log_start_offset: int
    batch_count: int
    valid_bytes: int


@dataclass(frozen=True)
class LogReadResult:
    data: bytes | memoryview
    next_offset: int  # where the next read continues (== the fetch offset when data is empty)
    high_watermark: int  # the log end offset when the read began
    log_start_offset: int


@dataclass(frozen=True)
class ReadPosition:
    """Where a read at some offset starts (its batch's segment and file position) and the
    bytes from there to the log end."""

    segment: LogSegment
    position: int
    available_bytes: int


@dataclass(frozen=True)
class TimestampAndOffset:
    timestamp_ms: int
    offset: int


class Log:
    def __init__(self, directory: Path, config: LogConfig, clock: Clock) -> None:
        self.directory = directory
        self.topic, self.partition = log_files.parse_topic_partition(directory)
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self._log_end_offset = 0
        self._log_start_offset = 0
        self._recovery_point = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock.now_ms()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # Offsets below this sit in rolled segments waiting for the scheduled flush that
        # Kafka runs after a roll (off the append path): then the recovery point moves here.
        self._rolled_up_to = 0
        self._closed = False
        self._data_dir: DataDir | None = None
        # Offsets below this were compacted by the cleaner (Kafka's cleaner checkpoint).
        self.cleaned_up_to_offset = 0

    # -- opening and recovery ----------------------------------------------------------

    @classmethod
    def open(
        cls, directory: str | Path, config: LogConfig | None = None, *, clock: Clock = SYSTEM_CLOCK
    ) -> Log:
        """Open (or create) the log, recovering whatever an unclean shutdown left behind."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config or LogConfig(), clock)
        tp = (log.topic, log.partition)
        log._data_dir = DataDir.acquire(directory.parent, tp)
        try:
            log._load()
        except BaseException:
            log._data_dir.release(tp, clean=False)
            raise
        return log

    def _load(self) -> None:
        from .recovery import load_segments

        assert self._data_dir is not None
        tp = (self.topic, self.partition)
        checkpointed_start = self._data_dir.log_start_offsets.get(tp, 0)
        recovery_point = (
            None if self._data_dir.clean_shutdown else self._data_dir.recovery_points.get(tp, 0)
        )
        loaded = load_segments(self, recovery_point)
        if not loaded.segments:
            start = max(checkpointed_start, 0)
            loaded.segments = [self._new_segment(start)]
            loaded.log_end_offset = start
        self._set_segments(loaded.segments)
        self._log_end_offset = loaded.log_end_offset
        self._log_start_offset = min(
            max(checkpointed_start, self._segments[0].base_offset), self._log_end_offset
        )
        self._recovery_point = (
            self._log_end_offset
            if recovery_point is None
            else min(max(recovery_point, loaded.recovered_up_to), self._log_end_offset)
        )
        for segment in self._segments[:-1]:
            segment.on_become_inactive()
        self._make_active(self._segments[-1])
        self._update_data_dir()

    def _new_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        """Open (or create) a segment of this log with its configured index settings."""
        return LogSegment.open(
            self.directory,
            base_offset,
            suffix=suffix,
            index_interval_bytes=self.config.index_interval_bytes,
            index_size_max_bytes=self.config.index_size_max_bytes,
            rolling_jitter_ms=self.config.segment_jitter_ms,
            now_ms=self.clock.now_ms(),
        )

    def _make_active(self, segment: LogSegment) -> None:
        for index in (segment.offset_index, segment.time_index):
            if index.max_entries * index.ENTRY.size < index.max_index_bytes:
                index.resize(self.config.index_size_max_bytes)

    def _set_segments(self, segments: Sequence[LogSegment]) -> None:
        # Copy-on-write: readers take the two lists without the lock and see a consistent pair.
        ordered = sorted(segments, key=lambda s: s.base_offset)
        self._segments = ordered
        self._base_offsets = [s.base_offset for s in ordered]

    # -- public facts ------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

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
            span.set_attribute("seglog.topic", self.topic)
            span.set_attribute("seglog.partition", self.partition)
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
            buffers, appended, max_timestamp = assign_offsets(
                view, batches, first_offset, leader_epoch, stamp_ms
            )
            next_offset = appended[-1].last_offset + 1
            total_bytes = len(view)  # the batches tile the validated input
            segment = self._maybe_roll(total_bytes, max_timestamp, next_offset - 1, now_ms)
            segment.append(buffers, appended)
            self._log_end_offset = next_offset
            self._unflushed_messages += next_offset - first_offset
            if self._unflushed_messages >= self.config.flush_messages:
                self.flush()
            return LogAppendInfo(
                first_offset,
                next_offset - 1,
                max_timestamp,
                stamp_ms,
                self._log_start_offset,
                len(appended),
                total_bytes,
            )

    def _maybe_roll(
        self, messages_bytes: int, max_timestamp: int, max_offset: int, now_ms: int
    ) -> LogSegment:
        segment = self._segments[-1]
        if segment.should_roll(
            messages_bytes=messages_bytes,
            max_timestamp=max_timestamp,
            max_offset=max_offset,
            segment_bytes=self.config.segment_bytes,
            segment_ms=self.config.segment_ms,
            now_ms=now_ms,
        ):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (a no-op on an empty one)."""
        with self._lock:
            self._check_open()
            active = self._segments[-1]
            if active.size == 0 and active.base_offset == self._log_end_offset:
                return active
            active.on_become_inactive()
            segment = self._new_segment(self._log_end_offset)
            self._make_active(segment)
            self._set_segments([*self._segments, segment])
            self._rolled_up_to = segment.base_offset
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
        if offset < 0 or max_bytes < 0:
            raise InvalidOffsetError(f"read at offset {offset} for {max_bytes} bytes: negative")
        log_end = self._log_end_offset
        start = self._log_start_offset
        if offset < start or offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{start}, {log_end}] of {self.directory.name}"
            )
        if offset == log_end:
            return LogReadResult(b"", offset, log_end, start)
        with tracer.start_as_current_span("seglog.log.read") as span:
            span.set_attribute("seglog.topic", self.topic)
            span.set_attribute("seglog.partition", self.partition)
            span.set_attribute("seglog.fetch_offset", offset)
            segments, bases = self._segments, self._base_offsets
            index = max(bisect.bisect_right(bases, offset) - 1, 0)
            for segment in segments[index:]:
                result = segment.read(offset, max_bytes, min_one_message=min_one_message)
                if result is not None:
                    span.set_attribute("seglog.bytes", len(result.data))
                    span.set_attribute("seglog.next_offset", result.next_offset)
                    return LogReadResult(result.data, result.next_offset, log_end, start)
            return LogReadResult(b"", offset, log_end, start)

    def bytes_from(self, offset: int, hint: ReadPosition | None = None) -> ReadPosition:
        """How many bytes lie from the batch holding `offset` to the log end, counted from
        file positions and segment sizes (a waiting fetch's `min_bytes`), never by reading
        the data. `hint`, a result of an earlier call for the same offset, skips the index
        lookup while its segment is still in the log."""
        segments, bases = self._segments, self._base_offsets
        if hint is not None and any(s is hint.segment for s in segments):
            segment, position = hint.segment, hint.position
        else:
            index = max(bisect.bisect_right(bases, offset) - 1, 0)
            segment, position = segments[index], segments[index].size
            for candidate in segments[index:]:
                found = candidate.translate_offset(offset)
                if found is not None:
                    segment, position = candidate, found.position
                    break
        after = False
        available = 0
        for s in segments:
            if s is segment:
                available, after = s.size - position, True
            elif after:
                available += s.size
        return ReadPosition(segment, position, max(available, 0))

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """The first record whose timestamp >= `timestamp_ms` (Kafka's ListOffsets); also
        LATEST_TIMESTAMP (-1) and EARLIEST_TIMESTAMP (-2). None when no record qualifies."""
        if timestamp_ms == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self._log_end_offset)
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self._log_start_offset)
        if timestamp_ms < 0:
            raise InvalidOffsetError(f"timestamp {timestamp_ms} is neither >= 0, -1 nor -2")
        start = self._log_start_offset
        for segment in self._segments:
            if segment.size == 0 or segment.max_timestamp_so_far < timestamp_ms:
                continue
            found = segment.find_offset_by_timestamp(timestamp_ms, max(start, segment.base_offset))
            if found is not None:
                return TimestampAndOffset(found[1], found[0])
        return None

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
                return
            if offset <= self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return
            keep = [s for s in self._segments if s.base_offset < offset]
            for segment in self._segments[len(keep) :]:
                segment.delete_files()
            self._set_segments(keep)
            active = keep[-1]
            active.truncate_to(offset)
            self._make_active(active)
            self._log_end_offset = active.read_next_offset()
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            self._update_data_dir()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset` (a follower far behind does this)."""
        if offset < 0:
            raise InvalidOffsetError(f"truncate_fully_and_start_at({offset}): negative offset")
        with self._lock:
            self._check_open()
            for segment in self._segments:
                segment.delete_files()
            segment = self._new_segment(offset)
            self._make_active(segment)
            self._set_segments([segment])
            self._log_end_offset = self._log_start_offset = self._recovery_point = offset
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
                self._update_data_dir()
            return self._log_start_offset

    def delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        """Take segments out of the log now; their files go after `file_delete_delay_ms`."""
        with self._lock:
            self._check_open()
            doomed_ids = {id(s) for s in doomed}
            if len(doomed_ids) >= len(self._segments):
                self.roll()
            keep = [s for s in self._segments if id(s) not in doomed_ids]
            self._set_segments(keep)
            for segment in doomed:
                segment.change_suffix("", log_files.DELETED_SUFFIX)
            self.schedule_delete(doomed)
            self._log_start_offset = max(self._log_start_offset, keep[0].base_offset)
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
        """Swap cleaned segments in for the ones they replace (the cleaner's last step)."""
        from .recovery import complete_swap

        with self._lock:
            self._check_open()
            old_ids = {id(s) for s in old_segments}
            keep = [s for s in self._segments if id(s) not in old_ids]
            self._set_segments([*keep, *new_segments])
            complete_swap(self, new_segments, old_segments)

    # -- flush, close ------------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment holding unflushed offsets and advance the recovery point."""
        with self._lock, tracer.start_as_current_span("seglog.log.flush") as span:
            self._check_open()
            span.set_attribute("seglog.topic", self.topic)
            span.set_attribute("seglog.partition", self.partition)
            target = self._log_end_offset
            for segment in self._segments:
                nxt = bisect.bisect_right(self._base_offsets, segment.base_offset)
                upper = self._base_offsets[nxt] if nxt < len(self._base_offsets) else None
                if upper is None or upper > self._recovery_point:
                    segment.flush()
            log_files.fsync_directory(self.directory)
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
            bases = self._base_offsets
            for i, segment in enumerate(self._segments):
                upper = bases[i + 1] if i + 1 < len(bases) else None
                if upper is None or upper > offset:
                    break
                if upper > self._recovery_point:
                    segment.flush()
            log_files.fsync_directory(self.directory)
            self._recovery_point = offset
            self._update_data_dir()

    def maybe_flush(self) -> None:
        """Driven by the log manager's scheduler: the flush a roll asked for (its rolled
        segments), then the time-based policy (`flush_ms`)."""
        if self._rolled_up_to > self._recovery_point:
            self.flush_up_to(self._rolled_up_to)
        if (
            self._unflushed_messages
            and self.clock.now_ms() - self._last_flush_ms >= self.config.flush_ms
        ):
            self.flush()

    def _update_data_dir(self) -> None:
        if self._data_dir is not None:
            self._data_dir.update(
                (self.topic, self.partition),
                recovery_point=self._recovery_point,
                log_start_offset=self._log_start_offset,
            )

    def checkpoint(self) -> None:
        if self._data_dir is not None:
            self._data_dir.checkpoint()

    def close(self) -> None:
        """Flush, trim the indexes and mark this log cleanly closed."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            for segment in self._segments:
                segment.close()
            for _, segment in self._pending_deletes:
                segment.delete_files()
            self._pending_deletes = []
            self._closed = True
        if self._data_dir is not None:
            self._data_dir.release((self.topic, self.partition), clean=True)

    def delete(self) -> None:
        """Remove the whole partition directory."""
        import shutil

        with self._lock:
            for segment in self._segments:
                segment.delete_files()
            self._closed = True
        if self._data_dir is not None:
            self._data_dir.forget((self.topic, self.partition))
            self._data_dir.release((self.topic, self.partition), clean=True)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )


__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "Log", "LogAppendInfo", "TimestampAndOffset"]
