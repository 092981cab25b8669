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
from .segment import LogSegment

logger = logging.getLogger(__name__)


class LogDeletion(LogAppending):
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
            self._high_watermark_position = self._log_end_position = None
            self._set_high_watermark(self._high_watermark)
            self.producer_state.delete_snapshots_from(self._log_end_offset + 1)
            self._rebuild_producer_state()
            self._update_data_dir()

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
            self._high_watermark_position = self._log_end_position = None
            self._set_high_watermark(offset)
            self.leader_epochs.clear()
            self.producer_state.delete_snapshots_from(0)
            self.producer_state.clear()
            for entry in epochs:
                if entry.start_offset <= offset:
                    self.leader_epochs.assign(entry.epoch, entry.start_offset)
            self.leader_epochs.truncate_from_start(offset)
            if producer_snapshot:
                log_files.atomic_write(self.producer_state.snapshot_path(offset), producer_snapshot)
                try:
                    self.producer_state.load_snapshot(offset)
                except CorruptRecordError as exc:  # the copy is bad: start with no producers
                    logger.error("%s: %s", self.directory, exc)
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
