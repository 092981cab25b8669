"""LogFlushing: a log's durability. fsync what changed and move the recovery point, on
demand, after `flush_messages` appended records (each append checks), and on the log
manager's scheduler: the flush a roll asks for, and `flush_ms`."""

from __future__ import annotations

from ..semconv import PARTITION, TOPIC
from . import log_files
from .config import LONG_MAX
from .log_state import LogState, tracer


class LogFlushing:
    def __init__(self, state: LogState) -> None:
        self._state = state

    def flush(self) -> None:
        """fsync every segment holding unflushed offsets and advance the recovery point."""
        state = self._state
        with state._lock, tracer.start_as_current_span("seglog.log.flush") as span:
            state._check_open()
            span.set_attribute(TOPIC, state.topic)
            span.set_attribute(PARTITION, state._partition_id)
            target = state._log_end_offset
            if state._changed_since_flush:
                snapshot = state._segments.snapshot()
                for i, segment in enumerate(snapshot.segments):
                    upper = snapshot.upper_bound_of(i)
                    if upper is None or upper > state._recovery_point:
                        segment.flush()
                state.leader_epochs.sync()  # a new log's first epoch entry, written unsynced
                log_files.fsync_directory(state.directory)
                state._changed_since_flush = False
            state._recovery_point = target
            state._unflushed_messages = 0
            state._last_flush_ms = state.clock.now_ms()
            state._update_data_dir()

    def flush_up_to(self, offset: int) -> None:
        """fsync the segments wholly below `offset` and move the recovery point there, so a
        crash rescans only what follows (Kafka's flush of a rolled segment)."""
        state = self._state
        with state._lock:
            state._check_open()
            if offset <= state._recovery_point:
                return
            snapshot = state._segments.snapshot()
            for i, segment in enumerate(snapshot.segments):
                upper = snapshot.upper_bound_of(i)
                if upper is None or upper > offset:
                    break
                if upper > state._recovery_point:
                    segment.flush()
            state.leader_epochs.sync()
            log_files.fsync_directory(state.directory)
            state._recovery_point = offset
            state._update_data_dir()

    def maybe_flush(self) -> bool:
        """Driven by the log manager's scheduler: the flush a roll asked for (its rolled
        segments), then the time-based policy (`flush_ms`). True while a time-based flush
        may still come due without another append (the scheduler keeps visiting); with
        Kafka's default flush_ms (never) an appended log needs one visit, for its rolls."""
        state = self._state
        if state._closed:
            return False
        if state._rolled_up_to > state._recovery_point:
            self.flush_up_to(state._rolled_up_to)
        if (
            state._unflushed_messages
            and state.clock.now_ms() - state._last_flush_ms >= state.config.flush_ms
        ):
            self.flush()
        return bool(state._unflushed_messages) and state.config.flush_ms < LONG_MAX
