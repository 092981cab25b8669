"""LogDeletion: taking data out of a log. Truncation at its end (a replica cut back to its
leader's log), the log start offset moved forward (DeleteRecords, retention's segments), and
the cleaner's segments swapped in for the ones they replace; files removed go after
`file_delete_delay_ms`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..errors import CorruptRecordError, InvalidOffsetError, OffsetOutOfRangeError
from . import log_files
from .leader_epoch_cache import EpochEntry
from .log_appending import LogAppending
from .log_state import LogState
from .segment import LogSegment

logger = logging.getLogger(__name__)


class LogDeletion:
    def __init__(self, state: LogState, appending: LogAppending) -> None:
        self._state = state
        self._appending = appending

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= `offset`. Truncation works on whole
        batches: a batch straddling `offset` goes too, and the log end offset becomes the
        offset after the last batch kept (<= `offset`)."""
        state = self._state
        if offset < 0:
            raise InvalidOffsetError(f"truncate_to({offset}): negative offset")
        with state._lock:
            state._check_open()
            if offset >= state._log_end_offset:
                # Nothing to cut, but an epoch entry may start at the log end: a replica
                # that became leader (which records its epoch's start) and appended nothing
                # before another was elected. Kept, it would make every fetch diverge again
                # (Kafka's truncateTo drops it the same way).
                state.leader_epochs.truncate_from_end(state._log_end_offset)
                return
            if offset <= state._segments.first.base_offset:
                self.truncate_fully_and_start_at(offset)
                return
            state._changed_since_flush = state._snapshot_due = True
            keep = [s for s in state._segments if s.base_offset < offset]
            for segment in state._segments.as_list()[len(keep) :]:
                segment.delete_files()
            state._segments.set(keep)
            active = keep[-1]
            active.truncate_to(offset)
            state._make_active(active)
            state._log_end_offset = active.read_next_offset()
            state.leader_epochs.truncate_from_end(state._log_end_offset)
            state._recovery_point = min(state._recovery_point, state._log_end_offset)
            state._log_start_offset = min(state._log_start_offset, state._log_end_offset)
            state._high_watermark_position = state._log_end_position = None
            state._set_high_watermark(state._high_watermark)
            state.producer_state.delete_snapshots_from(state._log_end_offset + 1)
            state._rebuild_producer_state()
            state._update_data_dir()

    def truncate_fully_and_start_at(
        self,
        offset: int,
        *,
        epochs: Sequence[EpochEntry] = (),
        producer_snapshot: bytes | None = None,
    ) -> None:
        """Drop every segment and start empty at `offset` (a follower far behind does this).
        A follower whose leader's older data lies in the object store starts with what that
        data's last segment copied (Kafka's buildRemoteLogAuxState): the leader `epochs` up
        to `offset` (the one holding `offset` then starts there) and the producer state at
        `offset` (a snapshot file's bytes, producer_state.py's format)."""
        state = self._state
        if offset < 0:
            raise InvalidOffsetError(f"truncate_fully_and_start_at({offset}): negative offset")
        with state._lock:
            state._check_open()
            state._changed_since_flush = state._snapshot_due = True
            for segment in state._segments:
                segment.delete_files()
            segment = state.segment_factory.open(offset)
            state._make_active(segment)
            state._segments.set([segment])
            state._log_end_offset = state._log_start_offset = state._recovery_point = offset
            state._high_watermark_position = state._log_end_position = None
            state._set_high_watermark(offset)
            state.leader_epochs.clear()
            state.producer_state.delete_snapshots_from(0)
            state.producer_state.clear()
            for entry in epochs:
                if entry.start_offset <= offset:
                    state.leader_epochs.assign(entry.epoch, entry.start_offset)
            state.leader_epochs.truncate_from_start(offset)
            if producer_snapshot:
                log_files.atomic_write(
                    state.producer_state.snapshot_path(offset), producer_snapshot
                )
                try:
                    state.producer_state.load_snapshot(offset)
                except CorruptRecordError as exc:  # the copy is bad: start with no producers
                    logger.error("%s: %s", state.directory, exc)
            state._update_data_dir()

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset forward (Kafka's DeleteRecords); whole segments below it
        are removed by the next retention pass. Returns the new log start offset."""
        state = self._state
        with state._lock:
            state._check_open()
            if offset < 0 or offset > state._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: log ends at {state._log_end_offset}"
                )
            if offset > state._log_start_offset:
                state._log_start_offset = offset
                state._set_high_watermark(state._high_watermark)
                state.leader_epochs.truncate_from_start(offset)
                state._update_data_dir()
            return state._log_start_offset

    def delete_segments(self, doomed: Sequence[LogSegment]) -> None:
        """Take segments out of the log now; their files go after `file_delete_delay_ms`."""
        state = self._state
        with state._lock:
            state._check_open()
            state._changed_since_flush = state._snapshot_due = True
            doomed_ids = {id(s) for s in doomed}
            if len(doomed_ids) >= len(state._segments):
                self._appending.roll()
            state._segments.remove(doomed)
            keep = state._segments.as_list()
            for segment in doomed:
                segment.change_suffix("", log_files.DELETED_SUFFIX)
            self.schedule_delete(doomed)
            state._log_start_offset = max(state._log_start_offset, keep[0].base_offset)
            state._set_high_watermark(state._high_watermark)
            state.producer_state.delete_snapshots_below(state._log_start_offset)
            state.leader_epochs.truncate_from_start(state._log_start_offset)
            state._update_data_dir()
        self.delete_due_files()

    def schedule_delete(self, segments: Sequence[LogSegment]) -> None:
        """Files already renamed to `.deleted` go after `file_delete_delay_ms`."""
        state = self._state
        due_ms = state.clock.now_ms() + state.config.file_delete_delay_ms
        with state._lock:
            state._pending_deletes.extend((due_ms, s) for s in segments)

    def delete_due_files(self) -> None:
        state = self._state
        now = state.clock.now_ms()
        with state._lock:
            due = [s for t, s in state._pending_deletes if t <= now]
            state._pending_deletes = [(t, s) for t, s in state._pending_deletes if t > now]
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
        state = self._state
        with state._lock:
            state._check_open()
            state._changed_since_flush = state._snapshot_due = True
            state._segments.replace(new_segments, old_segments)
            for segment in old_segments:
                segment.change_suffix("", log_files.DELETED_SUFFIX)
            self.schedule_delete(old_segments)
            for segment in new_segments:
                segment.change_suffix(log_files.SWAP_SUFFIX, "")
            log_files.fsync_directory(state.directory)
