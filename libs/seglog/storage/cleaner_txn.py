"""What one clean pass (cleaner.py) does with transactions, as Kafka's LogCleaner does it
(its CleanedTransactionMetadata and the batch retention of MemoryRecords.filterTo):

- A data batch of an aborted transaction goes; the transaction is noted as seen in this pass.
  A committed transactional batch notes its producer's transaction as seen too.
- A COMMIT marker may go once no batch of its transaction was seen in the pass (its data is
  gone: compacted away by earlier passes). An ABORT marker whose transaction's batches were
  seen (and go now) stays for this pass, and its aborted-transaction entry is written to the
  cleaned segment's `.txnindex`; otherwise it may go. Other control types stay.
- A marker that may go is not removed at once: the first pass stamps its batch with a delete
  horizon (now + `delete_retention_ms`, baseTimestamp with attribute bit 0x40, as a
  tombstone's), and a pass after the horizon removes it, so a read_committed consumer behind
  has `delete_retention_ms` to see the transaction end.
- The last batch of each producer still in the producer state stays, emptied if its records
  go (Kafka's RETAIN_EMPTY): its data batch holds the producer's last sequence, or, when the
  producer's last write was a marker, the marker holds its epoch (fencing). A batch that no
  producer needs goes whole.

The cleaned segment's `.txnindex` keeps the entries whose markers this pass did not reach
(at or past its end) and those its retained ABORT markers wrote: an aborted transaction with
no data left needs no entry (a reader has nothing of it to skip).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..records.batch import BatchHeader, RecordBatch
from .producer_entry import marker_of
from .producer_state import ProducerStateManager
from .txn_index import AbortedTxn

NO_DATA_OFFSET = -1


class TxnCleaning:
    """One pass's view of the transactions in the range it cleans."""

    def __init__(self, aborted: Sequence[AbortedTxn], producers: ProducerStateManager) -> None:
        self.end_offset = -1  # the pass's end, once its offset map is built
        self._aborted: dict[int, list[AbortedTxn]] = {}
        for txn in aborted:
            self._aborted.setdefault(txn.producer_id, []).append(txn)
        self._seen_aborted: set[AbortedTxn] = set()
        self._open_committed: set[int] = set()  # producers whose committed data was seen
        self._written: list[AbortedTxn] = []  # entries for the cleaned segment's .txnindex
        # producer id -> (last data offset or NO_DATA_OFFSET, epoch): what must stay.
        self._last_of: dict[int, tuple[int, int]] = {
            pid: (entry.runs[-1].last_offset if entry.runs else NO_DATA_OFFSET, entry.epoch)
            for pid, entry in producers.producers.items()
        }

    def aborted_txn(self, h: BatchHeader) -> AbortedTxn | None:
        if h.is_control or not h.is_transactional:
            return None
        for txn in self._aborted.get(h.producer_id, ()):
            if txn.first_offset <= h.base_offset <= txn.last_offset:
                return txn
        return None

    def data_read(self, h: BatchHeader) -> bool:
        """Note a data batch; whether it belongs to an aborted transaction (it goes)."""
        txn = self.aborted_txn(h)
        if txn is not None:
            self._seen_aborted.add(txn)
            return True
        if h.is_transactional:
            self._open_committed.add(h.producer_id)
        return False

    def marker_may_go(self, batch: RecordBatch) -> bool:
        """Note a control batch (before the pass's end); whether its marker may be removed
        (once its delete horizon has passed)."""
        h = batch.header
        if h.record_count == 0:
            return True  # emptied by an earlier clean
        marker = marker_of(batch.raw(), h)
        if marker is None:
            return False  # not a COMMIT or ABORT: kept
        if marker.committed:
            seen = h.producer_id in self._open_committed
            self._open_committed.discard(h.producer_id)
            return not seen
        seen_txns = [
            t
            for t in self._aborted.get(h.producer_id, ())
            if t.last_offset == h.base_offset and t in self._seen_aborted
        ]
        if seen_txns:
            self._written.extend(seen_txns)  # its data goes now: the entry stays this pass
            return False
        return True

    def keeps_producer_state(self, h: BatchHeader) -> bool:
        """Whether the batch is its producer's last one (kept, emptied if need be)."""
        if h.producer_id < 0:
            return False
        last = self._last_of.get(h.producer_id)
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset != NO_DATA_OFFSET:
            return h.last_offset == last_data_offset
        return h.is_control and h.producer_epoch == epoch

    def index_entries(self, entries: Sequence[AbortedTxn]) -> list[AbortedTxn]:
        """The cleaned segment's `.txnindex`, from its old segments' `entries` (called once
        a segment group is read): those whose markers are past the pass's end, and those the
        group's retained ABORT markers wrote."""
        written, self._written = self._written, []
        kept = [e for e in entries if e.last_offset >= self.end_offset] + written
        return sorted(set(kept), key=lambda t: (t.last_offset, t.producer_id))
