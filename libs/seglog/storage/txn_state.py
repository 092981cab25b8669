"""The transactions open on one partition, and the last stable offset they give (Kafka's
ProducerStateManager ongoingTxns / unreplicatedTxns).

A transaction opens at its producer's first transactional batch and is open until its COMMIT
or ABORT marker is appended; a completed one still counts as unstable until its marker is
below the high watermark (a leader change before that may lose the marker, and the
transaction is open again on the new leader). The first unstable offset is the smallest
first offset of those; the last stable offset (LSO) is min(first unstable, high watermark).
Everything here is derived from the replicated log (rebuilt from snapshots and batch headers
at load and after truncation), so followers and a new leader get the same LSO.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class OpenTransactions:
    """Changed under the log's lock; `first_unstable` is recomputed at each change, so
    readers (every fetch) read one attribute and take no lock. While `rebuilding` (a load or
    truncation replaying the log) readers keep the value from before: a state cleared and
    half replayed would show no open transaction, and a read_committed fetch in between
    would read one."""

    def __init__(self) -> None:
        self.ongoing: dict[int, int] = {}  # producer id -> the transaction's first offset
        self.unreplicated: list[CompletedTxn] = []
        self.first_unstable: int | None = None
        self._rebuilding = False

    def _changed(self) -> None:
        if self._rebuilding:
            return
        firsts = [*self.ongoing.values(), *(t.first_offset for t in self.unreplicated)]
        self.first_unstable = min(firsts) if firsts else None

    @contextmanager
    def rebuilding(self) -> Iterator[None]:
        self._rebuilding = True
        try:
            yield
        finally:
            self._rebuilding = False
            self._changed()

    def begin(self, producer_id: int, first_offset: int) -> None:
        self.ongoing[producer_id] = first_offset
        self._changed()

    def complete(self, txn: CompletedTxn) -> None:
        self.ongoing.pop(txn.producer_id, None)
        self.unreplicated.append(txn)
        self._changed()

    def last_stable_offset_of(self, txn: CompletedTxn) -> int:
        """The LSO a `.txnindex` entry records (Kafka's lastStableOffset(completedTxn)): the
        first offset of the oldest other transaction still open, else just past the marker."""
        others = [first for pid, first in self.ongoing.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def on_high_watermark(self, high_watermark: int) -> None:
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]
            self._changed()

    def last_stable_offset(self, high_watermark: int, log_start: int = 0) -> int:
        """min(first unstable, HW); a transaction whose start the log start has passed
        (retention, DeleteRecords) counts from the log start, as Kafka's
        maybeIncrementFirstUnstableOffset clamps it."""
        first = self.first_unstable
        return high_watermark if first is None else min(max(first, log_start), high_watermark)

    def clear(self) -> None:
        self.ongoing = {}
        self.unreplicated = []
        self._changed()
