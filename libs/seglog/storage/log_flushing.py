"""LogFlushing: a log's durability. fsync what changed and move the recovery point, on
demand, after `flush_messages` appended records (each append checks), and on the log
manager's scheduler: the flush a roll asks for, and `flush_ms`."""

from __future__ import annotations

from ..semconv import PARTITION, TOPIC
from . import log_files
from .config import LONG_MAX
from .log_state import LogState, tracer


class LogFlushing(LogState):
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
