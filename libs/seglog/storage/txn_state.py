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

from typing import NamedTuple


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class OpenTransactions:
    def __init__(self) -> None:
        self.ongoing: dict[int, int] = {}  # producer id -> the transaction's first offset
        self.unreplicated: list[CompletedTxn] = []

    def begin(self, producer_id: int, first_offset: int) -> None:
        self.ongoing[producer_id] = first_offset

    def complete(self, txn: CompletedTxn) -> None:
        self.ongoing.pop(txn.producer_id, None)
        self.unreplicated.append(txn)

    def last_stable_offset_of(self, txn: CompletedTxn) -> int:
        """The LSO a `.txnindex` entry records (Kafka's lastStableOffset(completedTxn)): the
        first offset of the oldest other transaction still open, else just past the marker."""
        others = [first for pid, first in self.ongoing.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def on_high_watermark(self, high_watermark: int) -> None:
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]

    def first_unstable_offset(self) -> int | None:
        firsts = [*self.ongoing.values(), *(t.first_offset for t in self.unreplicated)]
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def clear(self) -> None:
        self.ongoing = {}
        self.unreplicated = []
