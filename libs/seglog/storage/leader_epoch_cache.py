"""The leader epochs of one partition and where each began (Kafka's LeaderEpochFileCache),
kept in the partition directory's `leader-epoch-checkpoint` in Kafka's text format:

    0               <- version
    2               <- number of entries
    0 0             <- epoch start_offset, epochs and offsets increasing
    3 1042

written atomically whenever it changes, with one exception (after Kafka's KAFKA-15046, which
took the fsync out of truncations for the same reason: fsyncs on a busy path): the first entry
of a log that holds no batch yet — a new partition's leader starting its epoch — is written
and renamed into place without fsync, because when thousands of partitions are created those
fsyncs were half of a node's creation work. Why that loses nothing:
- Until a batch is appended, no restart reads the entry: loading truncates the entries that
  start at or past the loaded log end (`truncate_from_end`, as Kafka's LogLoader does), and an
  empty log's entry starts at its end. The next leader starts its own epoch anyway.
- Once batches follow, the log's next flush fsyncs the file (`sync`) before the directory and
  before it moves the recovery point or a clean close marks the log as needing no recovery:
  the only two things that let a restart skip recovering those batches. A crash before that
  flush recovers every segment, which assigns each batch's epoch again (LogSegment.recover);
  a file a power cut left empty or torn does not parse and is rebuilt from the batches.

A replica that becomes follower asks the new leader for the end of its latest epoch
(`end_offset_for`) and truncates what diverges (KIP-101, KIP-279). Entries are assigned as
batches are appended (a batch whose partitionLeaderEpoch is larger than the latest starts an
epoch at its base offset), rebuilt from the batches when segments are recovered, cut with the
log on truncation and moved with the log start offset.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from ..errors import CorruptRecordError
from .log_files import atomic_write

logger = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def read_epoch_entries(path: Path) -> list[EpochEntry]:
    if not path.exists():
        return []
    return parse_epoch_entries(path.read_text(), str(path))


def parse_epoch_entries(text: str, where: str) -> list[EpochEntry]:
    """A checkpoint's entries (Kafka's text format: version, count, then `epoch offset`
    lines); CorruptRecordError naming `where` when it is not one."""
    lines = text.splitlines()
    try:
        version, count = int(lines[0]), int(lines[1])
        if version != _VERSION or len(lines) - 2 != count:
            raise ValueError(f"version {version}, {count} entries declared, {len(lines) - 2} found")
        entries = []
        for line in lines[2:]:
            epoch, start = line.split(" ")
            entries.append(EpochEntry(int(epoch), int(start)))
    except (ValueError, IndexError) as exc:
        raise CorruptRecordError(f"malformed leader epoch checkpoint {where}: {exc}") from None
    for before, after in zip(entries, entries[1:], strict=False):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            raise CorruptRecordError(f"leader epoch checkpoint {where}: {after} after {before}")
    return entries


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self._lock = threading.Lock()
        # The file was replaced without fsync (a new log's first entry): the log's next
        # flush syncs it.
        self._unsynced = False
        # The file is derived from the batches' partitionLeaderEpoch fields: a file that
        # does not parse (a flipped bit, a torn write, or emptied after a write failed on a
        # full disk) is not a reason to refuse the partition: it starts empty and
        # `needs_rebuild` asks the loader to assign every batch again. (No file at all is a
        # log no leader ever stamped: nothing to rebuild.)
        self.needs_rebuild = False
        try:
            self._entries = read_epoch_entries(self.path)
        except CorruptRecordError as exc:
            logger.error("%s; rebuilding the leader epochs from the log's batches", exc)
            self._entries = []
            self.needs_rebuild = True

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        entries = self._entries
        return entries[-1].epoch if entries else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        return next((e.start_offset for e in self._entries if e.epoch == epoch), None)

    def assign(self, epoch: int, start_offset: int, *, log_holds_batches: bool = True) -> None:
        """Record that `epoch` begins at `start_offset`. Entries it contradicts (an epoch as
        large, or a start offset as late) go first, as in Kafka. The first entry of a log
        without batches (`log_holds_batches` False) is written without fsync (module
        docstring); every other change is written durably at once."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        with self._lock:
            latest = self._entries[-1] if self._entries else None
            if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
                return
            kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
            self._entries = [*kept, EpochEntry(epoch, start_offset)]
            self._write(durable=log_holds_batches or bool(kept))

    @property
    def sync_pending(self) -> bool:
        return self._unsynced

    def sync(self) -> None:
        """fsync a file written without it; the caller fsyncs the directory after (the
        rename). Called by the log's flush before it moves the recovery point."""
        with self._lock:
            if not self._unsynced:
                return
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:  # the directory is going away (deleted, set aside)
                self._unsynced = False
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    def assign_from_batches(self, batches: Iterable[tuple[int, int]]) -> None:
        """(partitionLeaderEpoch, base offset) of batches in log order: one larger than the
        latest epoch starts that epoch at its base offset (Kafka's append and recovery)."""
        for epoch, base_offset in batches:
            if epoch > self.latest_epoch:
                self.assign(epoch, base_offset)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(the largest epoch <= requested, the offset where it ended): the latest epoch ends
        at the log end; an epoch below every entry ends where the first entry starts;
        (-1, -1) when nothing is known."""
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [e for e in entries if e.epoch <= requested_epoch]
        if not floor:
            return requested_epoch, higher.start_offset
        return floor[-1].epoch, higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after `end_offset` (the log was cut there)."""
        with self._lock:
            kept = [e for e in self._entries if e.start_offset < end_offset]
            if len(kept) != len(self._entries):
                self._entries = kept
                self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch holding it starts there."""
        with self._lock:
            before = [e for e in self._entries if e.start_offset <= start_offset]
            if not before or (len(before) == 1 and before[0].start_offset == start_offset):
                return
            after = [e for e in self._entries if e.start_offset > start_offset]
            self._entries = [EpochEntry(before[-1].epoch, start_offset), *after]
            self._write()

    def clear(self) -> None:
        with self._lock:
            self._entries = []
            self._write()

    def _write(self, *, durable: bool = True) -> None:
        """Write the file after a change (fsync'd unless not `durable`). The entries in
        memory are the truth: a write that fails (a full disk) is logged and not raised,
        since the append or truncation that changed them has already happened to the log.
        The stale file is emptied (which needs no space), so a restart before the next
        successful write rebuilds the epochs from the batches rather than trusting entries
        the log has moved past."""
        lines = [str(_VERSION), str(len(self._entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in self._entries]
        if self.path.parent.exists():
            try:
                atomic_write(self.path, ("\n".join(lines) + "\n").encode(), sync=durable)
                self._unsynced = not durable
            except OSError as exc:
                logger.error("%s not written (%s); emptied until the next change", self.path, exc)
                try:
                    os.truncate(self.path, 0)
                except OSError:
                    pass
