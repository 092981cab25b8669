"""Idempotent producers' state in one partition (Kafka's ProducerStateManager): for each
producer id, its epoch and its last five runs of batches, so a retried batch is recognised
and answered with its original offsets, and a gap in sequence numbers is refused.

A run is batches of one producer and epoch stored back to back: consecutive in sequence and
in offset, so the record with sequence s sits at `first_offset + (s - first_sequence)`.
Kafka keeps its last five batches, which its producer's five pipelined one-batch requests
fit in; our producer sends a partition's unacknowledged batches in one request (gRPC keeps no
order between concurrent calls), and one append of one producer's batches is one run, on
the leader and, since runs join across fetch chunks, on every follower. So whatever a
producer has not yet had answered lies in one run, however many batches the request held.

The rules are Kafka's (ProducerAppendInfo, ProducerStateEntry), for appends from clients:
- a batch of the producer's epoch whose sequences lie inside one of its five runs is a
  duplicate: nothing is written, the offsets it was written at are answered;
- an epoch older than the producer's: INVALID_PRODUCER_EPOCH;
- a newer epoch must start at sequence 0 (when an epoch was known):
  OUT_OF_ORDER_SEQUENCE_NUMBER otherwise; a new epoch forgets the cached batches;
- the same epoch must continue at last sequence + 1 (0 after 2^31-1):
  OUT_OF_ORDER_SEQUENCE_NUMBER otherwise;
- a producer this partition knows nothing of (new, or its records all deleted) may start at
  any sequence.
Batches copied by followers update the state without checks, so a new leader dedupes too.

Transactions: a transactional batch opens its producer's transaction at its first offset
(ProducerStateEntry.currentTxnFirstOffset) until a COMMIT or ABORT marker of the producer is
appended, which also records the coordinator's epoch; the open ones give the partition's last
stable offset (txn_state.py). An ABORT marker gives an entry of the segment's `.txnindex`.

Snapshots (producer_snapshot.py, Kafka's format) are written when a segment rolls (at the
new segment's base) and when the log closes (at its end); loading takes the newest valid one
at or below where replay must start and replays the batch headers after it (control batches'
one record too). A snapshot that fails its CRC is deleted and the next older one is used.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path

from ..errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
)
from ..records.batch import CONTROL_MASK
from . import log_files, producer_snapshot
from .log_segments import SegmentsSnapshot
from .producer_entry import (
    INT_MAX,
    NO_EPOCH,
    NO_PRODUCER_ID,
    ActiveProducer,
    BatchMetadata,
    ProducerBatch,
    ProducerEntry,
    last_sequence_of,
    marker_of,
    producer_batch,
    producer_batches,
)
from .producer_snapshot import SnapshotEntry
from .txn_index import AbortedTxn
from .txn_state import CompletedTxn, OpenTransactions

SNAPSHOT_SUFFIX = ".snapshot"
# A coordinator's batch (Kafka's AppendOrigin.COORDINATOR: a group coordinator's transactional
# offsets) has no sequence: its epoch is checked, never its sequence, and it is no duplicate.
NO_SEQUENCE = -1
__all__ = [
    "NO_PRODUCER_ID",
    "ActiveProducer",
    "ProducerBatch",
    "ProducerStateManager",
    "last_sequence_of",
    "producer_batches",
]


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.txns = OpenTransactions()

    # -- appends ---------------------------------------------------------------------------

    def check(self, batch: ProducerBatch) -> BatchMetadata | None:
        """A client's batch: its duplicate's metadata if it is a retry, else None when it
        may be appended; raises when its sequence or epoch is refused."""
        entry = self.producers.get(batch.producer_id)
        if entry is None or entry.epoch == NO_EPOCH:
            return None
        if batch.first_sequence == NO_SEQUENCE:
            if batch.epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {batch.producer_id} in {self.directory.name}: epoch "
                    f"{batch.epoch} is older than the last seen epoch {entry.epoch}"
                )
            return None
        duplicate = entry.find_duplicate(batch.epoch, batch.first_sequence, batch.last_sequence)
        if duplicate is not None:
            return duplicate
        where = f"producer {batch.producer_id} in {self.directory.name}"
        if batch.epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"{where}: epoch {batch.epoch} is older than the last seen epoch {entry.epoch}"
            )
        if batch.epoch > entry.epoch:
            if batch.first_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"{where}: a new epoch {batch.epoch} must start at sequence 0, not "
                    f"{batch.first_sequence}"
                )
            return None
        last = entry.last_sequence
        if entry.runs and not _in_sequence(last, batch.first_sequence):
            raise OutOfOrderSequenceError(
                f"{where}: sequence {batch.first_sequence} does not follow {last} (a batch "
                f"before it is missing)"
            )
        return None

    def check_marker(self, producer_id: int, epoch: int) -> None:
        """A marker from the coordinator: refused for an epoch older than the producer's
        (Kafka's ProducerAppendInfo.checkProducerEpoch for markers)."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} in {self.directory.name}: marker epoch {epoch} is "
                f"older than the last seen epoch {entry.epoch}"
            )

    def check_append(
        self, batches: Sequence[ProducerBatch], batch_count: int
    ) -> BatchMetadata | None:
        """`check` for every producer batch of one append of `batch_count` batches, each on
        its own and in order (a later batch of the same producer continues the earlier one).

        Either every batch is new (None: append them all), or every batch repeats one
        already written, contiguously (the span they were written at is answered, nothing is
        written). A request mixing the two is refused whole: one answer (a base offset and a
        count) cannot say that some batches were written long ago and others just now, and
        answering the first duplicate's offsets for the whole request acknowledged the new
        batches at offsets holding other records (issue 26). Kafka's brokers refuse any
        produce (v3+) with more than one batch per partition; our producer sends a retried
        batch alone, so its answer is true of it whatever happened to its companions."""
        pending: dict[int, tuple[int, int]] = {}
        duplicates: list[BatchMetadata] = []
        for batch in batches:
            seen = pending.get(batch.producer_id)
            entry = self.producers.get(batch.producer_id)
            duplicate = (
                entry.find_duplicate(batch.epoch, batch.first_sequence, batch.last_sequence)
                if entry is not None and batch.first_sequence != NO_SEQUENCE
                else None
            )
            if duplicate is not None:
                duplicates.append(duplicate)
            elif seen is None or batch.first_sequence == NO_SEQUENCE:
                self.check(batch)
            elif batch.epoch == seen[0] and not _in_sequence(seen[1], batch.first_sequence):
                raise OutOfOrderSequenceError(
                    f"producer {batch.producer_id} in {self.directory.name}: sequence "
                    f"{batch.first_sequence} does not follow {seen[1]} in the same request"
                )
            pending[batch.producer_id] = (batch.epoch, batch.last_sequence)
        if not duplicates:
            return None
        if len(duplicates) < batch_count:
            raise InvalidRecordError(
                f"{self.directory.name}: {len(duplicates)} of the request's {batch_count} "
                f"batches were already written (offsets {duplicates[0].first_offset}.."
                f"{duplicates[-1].last_offset}) and the others are new; send each batch of an "
                f"idempotent producer in its own request"
            )
        for before, after in pairwise(duplicates):
            if after.first_offset != before.last_offset + 1:
                raise InvalidRecordError(
                    f"{self.directory.name}: the request repeats batches written at offsets "
                    f"{before.first_offset}..{before.last_offset} and {after.first_offset}.."
                    f"{after.last_offset}, not contiguous: retry each batch in its own request"
                )
        return BatchMetadata(
            duplicates[0].first_sequence,
            duplicates[-1].last_sequence,
            duplicates[0].first_offset,
            duplicates[-1].last_offset,
            max(d.timestamp_ms for d in duplicates),
        )

    def update(self, batches: Iterable[ProducerBatch]) -> list[AbortedTxn]:
        """Record appended batches (leader's after `check`, or a follower's copies), in
        order; the transactions their ABORT markers ended, as `.txnindex` entries (each
        with the LSO at its marker, as the leader computed it)."""
        aborted: list[AbortedTxn] = []
        for batch in batches:
            pid = batch.producer_id
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerEntry(pid)
            if batch.epoch != entry.epoch:
                entry.epoch = batch.epoch
                entry.runs.clear()
            entry.last_timestamp_ms = max(entry.last_timestamp_ms, batch.max_timestamp_ms)
            if batch.marker is not None:
                first = entry.current_txn_first_offset
                entry.current_txn_first_offset = -1
                entry.coordinator_epoch = batch.marker.coordinator_epoch
                if first < 0:  # a marker for no open transaction (a retry): ends nothing
                    continue
                txn = CompletedTxn(pid, first, batch.last_offset, not batch.marker.committed)
                if txn.aborted:
                    lso = self.txns.last_stable_offset_of(txn)
                    aborted.append(AbortedTxn(pid, first, txn.last_offset, lso))
                self.txns.complete(txn)
                continue
            if batch.first_sequence != NO_SEQUENCE:
                entry.add(batch)
            if batch.transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = batch.first_offset
                self.txns.begin(pid, batch.first_offset)
        return aborted

    def active_producers(self) -> list[ActiveProducer]:
        """Every producer the state holds (those not yet expired), by producer id."""
        return [
            ActiveProducer(
                pid,
                e.epoch,
                e.last_sequence,
                e.last_timestamp_ms,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for pid, e in sorted(self.producers.items())
        ]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        """Kafka's producer.id.expiration.ms: forget producers silent for that long (never
        one with a transaction open: its first offset holds the LSO)."""
        for producer_id in [
            p
            for p, e in self.producers.items()
            if now_ms - e.last_timestamp_ms >= expiration_ms and e.current_txn_first_offset < 0
        ]:
            del self.producers[producer_id]

    def clear(self) -> None:
        self.producers = {}
        self.txns.clear()

    def rebuild(self, snapshot: SegmentsSnapshot, log_start: int, log_end: int) -> None:
        """Kafka's rebuildProducerState: the newest valid snapshot at or below the log end,
        then the batch headers after it (no record is decoded but markers' one record).
        A segment whose `.txnindex` is stale (missing, torn, or its segment recovered) is
        rebuilt here: replay then starts at a snapshot at or below its base."""
        stale = [s for s in snapshot.segments if s.txn_index_stale]
        for segment in stale:
            segment.txn_index.reset()
        limit = stale[0].base_offset if stale else log_end
        loaded = self.latest_loadable(log_end, limit)
        offset = log_start if loaded is None else loaded
        for segment in (
            snapshot.segments[snapshot.floor_index(offset) :] if offset < log_end else ()
        ):
            found = segment.translate_offset(offset) if segment.base_offset < offset else None
            for position, header in segment.log.batches(0 if found is None else found.position):
                if header.last_offset < offset or header.producer_id < 0:
                    continue
                marker = None
                if header.attributes & CONTROL_MASK:
                    marker = marker_of(segment.log.read(position, header.size_in_bytes), header)
                batch = producer_batch(header, header.base_offset, header.last_offset, marker)
                if batch is None:
                    continue
                for entry in self.update([batch]):
                    if segment.txn_index_stale:
                        segment.txn_index.append(entry)
        for segment in stale:
            segment.txn_index_stale = False

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit() and len(stem) == 20:
                offsets.append(int(stem))
        return sorted(offsets)

    def take_snapshot(self, offset: int, *, sync: bool = True) -> None:
        """Write the state as of `offset` (temp file, rename; fsynced when `sync`: a roll
        leaves that to the scheduled flush of the rolled segment, as Kafka does, and a torn
        unsynced snapshot fails its CRC at load and the next older one is used)."""
        entries = []
        for producer_id, entry in sorted(self.producers.items()):
            last = entry.runs[-1] if entry.runs else None
            entries.append(
                SnapshotEntry(
                    producer_id,
                    entry.epoch,
                    last.last_sequence if last else -1,
                    last.last_offset if last else -1,
                    (last.last_offset - last.last_batch_first_offset) if last else 0,
                    entry.last_timestamp_ms,
                    entry.coordinator_epoch,
                    entry.current_txn_first_offset,
                )
            )
        data = producer_snapshot.encode(entries)
        path = self.snapshot_path(offset)
        if sync:
            log_files.atomic_write(path, data)
            return
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def load_snapshot(self, offset: int) -> None:
        """Replace the state with the snapshot at `offset`; CorruptRecordError (and the
        file deleted) when it is not a valid one."""
        path = self.snapshot_path(offset)
        data = path.read_bytes()
        try:
            loaded = producer_snapshot.decode(data)
        except (struct.error, ValueError) as exc:
            path.unlink(missing_ok=True)
            raise CorruptRecordError(f"producer snapshot {path.name}: {exc}") from None
        producers = {}
        self.txns.clear()
        for e in loaded:
            entry = ProducerEntry(
                e.producer_id,
                e.epoch,
                last_timestamp_ms=e.timestamp_ms,
                coordinator_epoch=e.coordinator_epoch,
                current_txn_first_offset=e.current_txn_first_offset,
            )
            last_seq, last_offset, delta = e.last_sequence, e.last_offset, e.offset_delta
            if last_offset >= 0:
                entry.runs.append(
                    BatchMetadata(
                        (last_seq - delta) % (INT_MAX + 1),
                        last_seq,
                        last_offset - delta,
                        last_offset,
                        e.timestamp_ms,
                        last_offset - delta,
                    )
                )
            if e.current_txn_first_offset >= 0:
                self.txns.begin(e.producer_id, e.current_txn_first_offset)
            producers[e.producer_id] = entry
        self.producers = producers

    def delete_snapshots_from(self, offset: int) -> None:
        """Snapshots at or past `offset` describe offsets the log no longer has."""
        for snapshot in self.snapshot_offsets():
            if snapshot >= offset:
                self.snapshot_path(snapshot).unlink(missing_ok=True)

    def delete_snapshots_below(self, offset: int) -> None:
        """Keep the newest snapshot at or below `offset` (where loading starts) and later."""
        older = [s for s in self.snapshot_offsets() if s <= offset]
        for snapshot in older[:-1]:
            self.snapshot_path(snapshot).unlink(missing_ok=True)

    def latest_loadable(self, log_end_offset: int, limit: int | None = None) -> int | None:
        """Load the newest valid snapshot at or below `limit` (the log end by default);
        its offset, or None. Snapshots past the log end are deleted."""
        limit = log_end_offset if limit is None else limit
        for snapshot in reversed(self.snapshot_offsets()):
            if snapshot > log_end_offset:
                self.snapshot_path(snapshot).unlink(missing_ok=True)
                continue
            if snapshot > limit:
                continue
            try:
                self.load_snapshot(snapshot)
                return snapshot
            except (CorruptRecordError, OSError):
                continue
        self.clear()
        return None


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == INT_MAX)
