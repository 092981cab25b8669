"""LogSegment: one `.log` file with its `.index`, `.timeindex` and `.txnindex` (txn_index.py).

The segment owns the index bookkeeping: after every `index_interval_bytes` of appended data it
adds an offset-index entry (the batch's last offset, the batch's position) and a time-index
entry (the largest timestamp so far, the offset of the batch that carried it). Both indexes
are derived from the log and can be rebuilt from it (`recover`).
It also remembers where its last few appends ended (append_ends.py), for caught-up reads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import InvalidOffsetError, StorageError
from ..records import batch_table
from ..records._scan import index_entries
from ..records.batch import NO_TIMESTAMP
from ..spans import EngineTracer
from . import log_files, segment_repair
from . import open_files as open_files_module
from .append_ends import AppendEnds
from .file_records import FileRecords
from .leader_epoch_cache import LeaderEpochCache
from .offset_index import OffsetIndex
from .open_files import OpenFileCache
from .segment_repair import SegmentRecovery
from .time_index import TimeIndex
from .txn_index import TransactionIndex
from .valid_prefix import BatchPosition

tracer = EngineTracer("seglog.storage")


class AppendedBatch(NamedTuple):
    """What the segment needs to know of each batch it appends, in file order."""

    size_in_bytes: int
    last_offset: int
    max_timestamp: int


class LogSegment:
    def __init__(
        self,
        log: FileRecords,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        base_offset: int,
        *,
        index_interval_bytes: int,
        rolling_jitter_ms: int,
        created_ms: int,
        open_files: OpenFileCache = open_files_module.SHARED,
    ) -> None:
        self.log = log
        self._open_files = open_files
        self.offset_index = offset_index
        self.time_index = time_index
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = created_ms
        # Read from the indexes on first use (`_load_state`), not at open: an idle segment's
        # indexes stay unopened (Kafka's LogSegment reads its max timestamp lazily too).
        self._state_loaded = False
        self._state_lock = threading.Lock()
        self._max_timestamp_so_far = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_last_index_entry = 0
        # The first batch's max timestamp: segment_ms rolls measure from it (Kafka's
        # rollingBasedTimestamp), so a log rebuilt from old data rolls as the original did.
        self.rolling_based_timestamp: int | None = None
        self.append_ends = AppendEnds()
        name = log.path.name.replace(log_files.LOG_SUFFIX, log_files.TXN_INDEX_SUFFIX, 1)
        self.txn_index = TransactionIndex(log.path.with_name(name))
        # Set by the loader when the `.txnindex` must be rebuilt from the log (Log's load).
        self.txn_index_stale = False

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        index_size_max_bytes: int,
        rolling_jitter_ms: int,
        now_ms: int,
        suffix: str = "",
        open_files: OpenFileCache = open_files_module.SHARED,
    ) -> LogSegment:
        """Open or create the segment's three files; indexes that are missing come back empty
        (`segment_checks.indexes_need_rebuild` tells the caller to rebuild them)."""
        log = FileRecords.open(log_files.log_path(directory, base_offset, suffix))
        # Not writable until the segment takes appends (`make_active`): an old segment's
        # index is mapped at its trimmed size, never stretched to the preallocated one.
        offset_index = OffsetIndex(
            log_files.index_path(directory, base_offset, suffix),
            base_offset,
            index_size_max_bytes,
            writable=False,
            open_files=open_files,
        )
        time_index = TimeIndex(
            log_files.time_index_path(directory, base_offset, suffix),
            base_offset,
            index_size_max_bytes,
            writable=False,
            open_files=open_files,
        )
        segment = cls(
            log,
            offset_index,
            time_index,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            rolling_jitter_ms=rolling_jitter_ms,
            created_ms=now_ms,
            open_files=open_files,
        )
        return segment

    def _load_state(self) -> None:
        if self._state_loaded:
            return
        with self._state_lock:  # a reader's first look must not overwrite an append's
            if not self._state_loaded:
                self._read_state()

    def _read_state(self) -> None:
        last = self.time_index.last_entry
        self._max_timestamp_so_far = last.timestamp_ms
        self._offset_of_max_timestamp = last.offset
        entries = self.offset_index.entries
        last_position = self.offset_index.entry(entries - 1).position if entries else 0
        self._bytes_since_last_index_entry = self.log.size - last_position
        self._state_loaded = True
        if not self.log.is_open:
            # An old segment asked for its max timestamp (a retention pass): the answer is
            # kept, the mapping need not be.
            self.release_indexes()

    @property
    def max_timestamp_so_far(self) -> int:
        self._load_state()
        return self._max_timestamp_so_far

    @max_timestamp_so_far.setter
    def max_timestamp_so_far(self, value: int) -> None:
        self._load_state()
        self._max_timestamp_so_far = value

    @property
    def offset_of_max_timestamp(self) -> int:
        self._load_state()
        return self._offset_of_max_timestamp

    @offset_of_max_timestamp.setter
    def offset_of_max_timestamp(self, value: int) -> None:
        self._load_state()
        self._offset_of_max_timestamp = value

    @property
    def bytes_since_last_index_entry(self) -> int:
        self._load_state()
        return self._bytes_since_last_index_entry

    @bytes_since_last_index_entry.setter
    def bytes_since_last_index_entry(self, value: int) -> None:
        self._load_state()
        self._bytes_since_last_index_entry = value

    def make_active(self) -> None:
        """The segment takes appends: its `.log` stays open, its indexes are preallocated
        when first used."""
        self.log.keep_open()
        self.offset_index.make_writable()
        self.time_index.make_writable()

    def release_indexes(self) -> None:
        """Unmap an old segment's indexes until they are used again (idle segments cost no
        mapping: a node has vm.max_map_count, 65530 by default, of them)."""
        self.offset_index.release()
        self.time_index.release()

    # -- facts -------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size

    def read_next_offset(self) -> int:
        """The offset after the last batch: scan forward from the last index entry."""
        start = self.offset_index.lookup(1 << 62)
        next_offset = self.base_offset
        for found in self.log.batches(start.position):
            next_offset = found.header.next_offset
        return next_offset

    def first_batch_timestamp(self) -> int | None:
        if self.log.size == 0:
            return None
        return self.log.header_at(0).max_timestamp

    @property
    def largest_timestamp_ms(self) -> int:
        """The largest record timestamp, or the file's mtime when no batch has one."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.stat(self.log.path).st_mtime * 1000)

    # -- append ------------------------------------------------------------------------

    def append(
        self, buffers: Sequence[bytes | bytearray | memoryview], batches: Sequence[AppendedBatch]
    ) -> None:
        """Write the batches' bytes (one vectored write) and add their index entries (the
        paths that rewrite batches in Python: LogAppendTime stamps)."""
        table = batch_table.table_of(batches)
        next_offset = batches[-1].last_offset + 1 if batches else -1  # none: nothing noted
        self._append(lambda: self.log.append(buffers), table, -1, next_offset)

    def append_table(
        self,
        view: memoryview,
        table: bytes,
        *,
        first_offset: int,
        next_offset: int,
        leader_epoch: int | None,
        keep_offsets: bool,
    ) -> None:
        """Write the scanned batches of `view` (records/batch_table.py) and add their index
        entries, without a Python object per batch: as they are (`keep_offsets`, a
        follower's), or with offsets from `first_offset` on and `leader_epoch` (None: each
        batch's own) written into their prefixes on the way (the leader's)."""
        if keep_offsets:
            self._append(lambda: self.log.append((view,)), table, -1, next_offset)
        else:
            self._append(
                lambda: self.log.append_batches(view, table, first_offset, leader_epoch),
                table,
                first_offset,
                next_offset,
            )

    def _append(
        self, write: Callable[[], object], table: bytes, first_offset: int, next_offset: int
    ) -> None:
        """All or nothing: when the index write fails (a full disk), the log is cut back to
        its size before the call, the indexes to their entries before it, and a retriable
        StorageError is raised, so the partition takes appends again once space returns
        and no byte of the failed append is ever served."""
        self._load_state()  # as of before these bytes: they count from the last entry
        position = self.log.size
        with tracer.start_as_current_span("seglog.segment.write") as span:
            span.set_attribute("seglog.segment_base_offset", self.base_offset)
            span.set_attribute("seglog.position", position)
            write()
        before = self._index_state()
        if self.rolling_based_timestamp is None and table:
            self.rolling_based_timestamp = batch_table.entry(table, 0).max_timestamp
        try:
            with tracer.start_as_current_span("seglog.segment.index"):
                self.index_table(position, table, first_offset)
        except OSError as exc:
            self._roll_back(position, before)
            raise StorageError(
                f"index write for {self.log.path} failed, append rolled back to position "
                f"{position}: {exc}"
            ) from exc
        if table:
            self.append_ends.note(next_offset, self.log.size)

    def _index_state(self) -> tuple[int, int, int, int, int | None, int]:
        self._load_state()
        return (
            self.offset_index.entries,
            self.time_index.entries,
            self._max_timestamp_so_far,
            self._offset_of_max_timestamp,
            self.rolling_based_timestamp,
            self._bytes_since_last_index_entry,
        )

    def _roll_back(self, position: int, state: tuple[int, int, int, int, int | None, int]) -> None:
        self.append_ends.forget()
        (
            offset_entries,
            time_entries,
            self._max_timestamp_so_far,
            self._offset_of_max_timestamp,
            self.rolling_based_timestamp,
            self._bytes_since_last_index_entry,
        ) = state
        self.log.truncate_to(position)
        for index, entries in (
            (self.offset_index, offset_entries),
            (self.time_index, time_entries),
        ):
            try:
                index.truncate_to_entries(entries)
            except OSError:
                pass  # the entry count is what readers use; the original error is reported

    def index_table(self, position: int, table: bytes, first_offset: int) -> None:
        """Track the largest timestamp, and add an index entry (the batch's last offset and
        position, and the largest timestamp so far) for a batch that starts after more than
        `index_interval_bytes` appended since the previous entry, as Kafka's LogSegment does:
        computed for the whole table in one C call (records/_scan.c: index_entries), each
        index getting its new entries in one write. `first_offset` -1: the table's batches
        keep their offsets."""
        self._load_state()  # then the private fields: this runs on every append
        room = min(self.offset_index.free_slots(), self.time_index.free_slots())
        # The time index's last entry is read only when an entry can come of this append: a
        # batch gets one when more than the interval lies behind it since the last entry
        # (the bytes written from `position` bound that), and most small appends get none.
        since = self._bytes_since_last_index_entry
        last_time_ms = (
            self.time_index.last_entry.timestamp_ms
            if since + self.log.size - position > self.index_interval_bytes
            else NO_TIMESTAMP
        )
        try:
            offset_entries, time_entries, since, max_timestamp, offset_of_max = index_entries(
                table,
                first_offset,
                self.base_offset,
                position,
                since,
                self.index_interval_bytes,
                self._max_timestamp_so_far,
                self._offset_of_max_timestamp,
                last_time_ms,
                room,
            )
        except ValueError as exc:
            raise InvalidOffsetError(f"{self.offset_index.path}: {exc}") from None
        if offset_entries:
            self.offset_index.append_packed(offset_entries)
            self.time_index.append_packed(time_entries)
        self._bytes_since_last_index_entry = since
        self._max_timestamp_so_far = max_timestamp
        self._offset_of_max_timestamp = offset_of_max

    def should_roll(
        self,
        *,
        messages_bytes: int,
        max_timestamp: int,
        max_offset: int,
        segment_bytes: int,
        segment_ms: int,
        now_ms: int,
    ) -> bool:
        if self.log.size > segment_bytes - messages_bytes:
            return True
        if self.log.size > 0:
            if self.rolling_based_timestamp is None:
                self.rolling_based_timestamp = self.first_batch_timestamp()
            waited_ms = (
                max_timestamp - self.rolling_based_timestamp
                if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0
                else now_ms - self.created_ms
            )
            if waited_ms > segment_ms - self.rolling_jitter_ms:
                return True
        if self.offset_index.is_full() or self.time_index.is_full():
            return True
        return max_offset - self.base_offset > 0x7FFFFFFF

    # -- read (the slices a fetch sends, and timestamp lookups: segment_reads.py) --------

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchPosition | None:
        """The batch holding `offset` (or the first after it), starting from the index."""
        with tracer.start_as_current_span("seglog.segment.index_lookup") as span:
            remembered = self.append_ends.batch_at(self.log, offset, start_position)
            if remembered is not None:
                span.set_attribute("seglog.position", remembered.position)
                return remembered
            entry = self.offset_index.lookup(offset)
            found = self.log.search_offset(offset, max(entry.position, start_position))
            span.set_attribute("seglog.position", -1 if found is None else found.position)
            return found

    # -- recovery and truncation (segment_repair.py) ----------------------------------

    def recover(
        self, epochs: LeaderEpochCache | None = None, *, upper_bound: int | None = None
    ) -> SegmentRecovery:
        return segment_repair.recover(self, epochs, upper_bound)

    def truncate_to(self, offset: int) -> int:
        return segment_repair.truncate(self, offset)

    # -- lifecycle ---------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """The segment stops being the active one: final time entry, trim the indexes."""
        self.append_ends.forget()
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True
        )
        self.offset_index.make_read_only()
        self.time_index.make_read_only()
        self.log.park_when_idle(self._open_files, self.release_indexes)

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush(create_if_missing=self.log.size > 0)

    def close(self) -> None:
        """Final time entry, trim, close. A segment whose state was never read took no
        append since it opened: its indexes are as they were, and stay unopened. A segment
        holding data leaves Kafka's three files (an empty index is created); an empty one
        leaves only its `.log` (Kafka rebuilds a missing index; so does seglog)."""
        if self._state_loaded and self._max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self._max_timestamp_so_far, self._offset_of_max_timestamp, skip_full_check=True
            )
        holds_data = self.log.size > 0
        self.offset_index.close(create_if_missing=holds_data)
        self.time_index.close(create_if_missing=holds_data)
        self.txn_index.close(create_if_missing=holds_data)
        self.log.close()

    def change_suffix(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the files (`.log` -> `.log.deleted`, and so on)."""
        for f in (self.log, self.offset_index, self.time_index, self.txn_index):
            name = f.path.name
            base = name[: len(name) - len(old_suffix)] if old_suffix else name
            f.rename_to(f.path.with_name(base + new_suffix))

    def delete_files(self) -> None:
        self.txn_index.delete()
        self.offset_index.delete()
        self.time_index.delete()
        self.log.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log.path})"
