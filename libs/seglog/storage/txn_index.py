"""TransactionIndex: a segment's `.txnindex`, the transactions aborted by ABORT markers written
in that segment (Kafka's TransactionIndex and AbortedTxn, byte for byte).

The file is a run of 34-byte entries, big-endian, in the order the markers were appended:

    int16  version = 0
    int64  producer_id
    int64  first_offset        the transaction's first offset on this partition
    int64  last_offset         the ABORT marker's offset
    int64  last_stable_offset  the LSO once the marker was written: the first offset of the
                               oldest transaction then still open (another producer's), else
                               last_offset + 1

A read_committed fetch of [start, end) answers, with its records, every entry whose
transaction overlaps it (last_offset >= start and first_offset < end), from the segment
holding `start` onward, and stops at the first segment holding an entry whose
last_stable_offset >= end: no later marker can abort a transaction that began before `end`
(Kafka's TxnIndexSearchResult.isComplete).

Kafka creates the file on the first abort; seglog also leaves an empty one beside every
segment that holds data once the segment is closed or rolled, so a missing file is known
lost and is rebuilt at load (as is one whose size is not a multiple of 34: a torn tail).
Written without fsync on each append, like the offset index: it is fsynced with its segment,
and a crash before that recovers the segment, which rebuilds it.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

from ..errors import CorruptRecordError

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")  # 34 bytes
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnSearch(NamedTuple):
    aborted: list[AbortedTxn]
    complete: bool


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: list[AbortedTxn] | None = None  # read on first use
        self._unsynced = False  # appended or created since the last fsync
        self._known_to_exist = False  # a stat per flush of every segment saved

    # -- reading -----------------------------------------------------------------------

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            # A torn tail (a crash mid-write) is not read: `is_torn` makes the loader
            # rebuild the file.
            whole = len(data) - len(data) % ENTRY.size
            entries = []
            for version, pid, first, last, lso in ENTRY.iter_unpack(data[:whole]):
                if version != VERSION:
                    raise CorruptRecordError(f"{self.path.name}: entry version {version}")
                entries.append(AbortedTxn(pid, first, last, lso))
            self._entries = entries
        return self._entries

    @property
    def entries(self) -> list[AbortedTxn]:
        with self._lock:
            return list(self._load())

    def is_torn(self) -> bool:
        """Missing, or a size that is not whole entries: to be rebuilt from the log."""
        try:
            return self.path.stat().st_size % ENTRY.size != 0
        except FileNotFoundError:
            return True

    def collect(self, start: int, end: int) -> TxnSearch:
        """Entries overlapping [start, end) (Kafka's collectAbortedTxns)."""
        with self._lock:
            found = []
            for entry in self._load():
                if entry.last_offset >= start and entry.first_offset < end:
                    found.append(entry)
                if entry.last_stable_offset >= end:
                    return TxnSearch(found, True)
            return TxnSearch(found, False)

    # -- writing -----------------------------------------------------------------------

    def append(self, entry: AbortedTxn) -> None:
        """Kafka refuses an entry whose last offset is below the previous one's."""
        with self._lock:
            entries = self._load()
            if entries and entry.last_offset < entries[-1].last_offset:
                raise CorruptRecordError(
                    f"{self.path.name}: aborted transaction ending at {entry.last_offset} "
                    f"after one ending at {entries[-1].last_offset}"
                )
            with open(self.path, "ab") as f:
                f.write(ENTRY.pack(VERSION, *entry))
            entries.append(entry)
            self._unsynced = True

    def create_if_missing(self) -> None:
        with self._lock:
            if not self._known_to_exist and not self.path.exists():
                self.path.touch()
                self._unsynced = True
            self._known_to_exist = True

    def reset(self) -> None:
        """Empty (a recovered segment's index is rebuilt from its log)."""
        with self._lock:
            with open(self.path, "wb"):
                pass
            self._entries = []
            self._unsynced = True

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or past `offset` (the log was cut there)."""
        with self._lock:
            entries = self._load()
            keep = [e for e in entries if e.last_offset < offset]
            if len(keep) == len(entries) and not self.is_torn_unlocked():
                return
            if self.path.exists() or keep:
                with open(self.path, "r+b" if self.path.exists() else "wb") as f:
                    f.truncate(len(keep) * ENTRY.size)
                self._unsynced = True
            self._entries = keep

    def is_torn_unlocked(self) -> bool:
        try:
            return self.path.stat().st_size % ENTRY.size != 0
        except FileNotFoundError:
            return False

    def close(self, *, create_if_missing: bool) -> None:
        """A segment holding data leaves its file, empty or not: missing means lost."""
        if create_if_missing:
            self.create_if_missing()

    def flush(self, *, create_if_missing: bool = False) -> None:
        if create_if_missing:
            self.create_if_missing()
        if not self._unsynced:  # an fsync only for what changed: most segments take none
            return
        self._unsynced = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename_to(self, path: Path) -> None:
        with self._lock:
            if self.path.exists():
                os.replace(self.path, path)
            self.path = path
            self._known_to_exist = False

    def delete(self) -> None:
        with self._lock:
            self.path.unlink(missing_ok=True)
            self._entries = None
            self._known_to_exist = False
