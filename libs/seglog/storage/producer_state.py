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

Snapshots (`<20-digit offset>.snapshot` beside the segments, Kafka's format, big-endian):

    int16  version = 1
    uint32 crc       CRC-32C of everything after it
    int32  count
    count x { int64 producer_id, int16 epoch, int32 last_sequence, int64 last_offset,
              int32 offset_delta (last offset - first offset of the last batch),
              int64 timestamp, int32 coordinator_epoch (-1), int64 current_txn_first_offset (-1) }

A snapshot holds the state as of its offset, and only each producer's last batch (Kafka's
format and rule: a reloaded producer dedupes against that one batch, later batches replayed
from the log join it). They are written when a segment
rolls (at the new segment's base) and when the log closes (at its end); loading takes the
newest valid one at or below the log end and replays the batch headers after it. A snapshot
that fails its CRC is deleted and the next older one is used.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import crc32c

from ..errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
)
from ..records.batch import CONTROL_MASK, BatchHeader
from . import log_files
from .log_segments import SegmentsSnapshot

SNAPSHOT_SUFFIX = ".snapshot"
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_EPOCH = -1
# A coordinator's batch (Kafka's AppendOrigin.COORDINATOR: a group coordinator's transactional
# offsets) has no sequence: its epoch is checked, never its sequence, and it is no duplicate.
NO_SEQUENCE = -1
INT_MAX = 2**31 - 1
_VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, count
_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes


@dataclass(frozen=True)
class BatchMetadata:
    """Where a producer's batches were written: one batch, or a run of them (see above)."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp_ms: int
    # The run's last batch starts here (snapshots keep that batch alone, as Kafka's do).
    last_batch_first_offset: int = -1

    def covering(self, first: int, last: int) -> BatchMetadata | None:
        """The part of this run holding sequences [first, last], if it holds them all."""
        if not (self.first_sequence <= first <= last <= self.last_sequence):
            return None
        start = self.first_offset + (first - self.first_sequence)
        return BatchMetadata(first, last, start, start + (last - first), self.timestamp_ms)

    def joined(self, batch: ProducerBatch) -> BatchMetadata | None:
        """This run with `batch` after it, if the batch continues it in sequence and offset
        (never across the sequence wrap, which would break `covering`'s arithmetic)."""
        if batch.first_sequence != self.last_sequence + 1 or (
            batch.first_offset != self.last_offset + 1
        ):
            return None
        return BatchMetadata(
            self.first_sequence,
            batch.last_sequence,
            self.first_offset,
            batch.last_offset,
            max(self.timestamp_ms, batch.max_timestamp_ms),
            batch.first_offset,
        )


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    runs: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp_ms: int = -1

    @property
    def last_sequence(self) -> int:
        return self.runs[-1].last_sequence if self.runs else -1

    def find_duplicate(self, epoch: int, first: int, last: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for run in self.runs:
            found = run.covering(first, last)
            if found is not None:
                return found
        return None

    def add(self, batch: ProducerBatch) -> None:
        joined = self.runs[-1].joined(batch) if self.runs else None
        if joined is not None:
            self.runs[-1] = joined
            return
        self.runs.append(
            BatchMetadata(
                batch.first_sequence,
                batch.last_sequence,
                batch.first_offset,
                batch.last_offset,
                batch.max_timestamp_ms,
                batch.first_offset,
            )
        )


@dataclass(frozen=True)
class ProducerBatch:
    """What the state needs of one appended batch (from its header)."""

    producer_id: int
    epoch: int
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp_ms: int


@dataclass(frozen=True)
class ActiveProducer:
    """A producer's state as Kafka's DescribeProducers shows it (ProducerStateEntry)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp_ms: int


def last_sequence_of(base_sequence: int, last_offset_delta: int) -> int:
    """Sequences wrap past 2^31-1 to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    return (base_sequence + last_offset_delta) % (INT_MAX + 1)


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}

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

    def update(self, batches: Iterable[ProducerBatch]) -> None:
        """Record appended batches (leader's after `check`, or a follower's copies)."""
        for batch in batches:
            entry = self.producers.get(batch.producer_id)
            if entry is None:
                entry = self.producers[batch.producer_id] = ProducerEntry(batch.producer_id)
            if batch.epoch != entry.epoch:
                entry.epoch = batch.epoch
                entry.runs.clear()
            if batch.first_sequence != NO_SEQUENCE:
                entry.add(batch)
            entry.last_timestamp_ms = max(entry.last_timestamp_ms, batch.max_timestamp_ms)

    def active_producers(self) -> list[ActiveProducer]:
        """Every producer the state holds (those not yet expired), by producer id."""
        return [
            ActiveProducer(pid, e.epoch, e.last_sequence, e.last_timestamp_ms)
            for pid, e in sorted(self.producers.items())
        ]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        """Kafka's producer.id.expiration.ms: forget producers silent for that long."""
        for producer_id in [
            p for p, e in self.producers.items() if now_ms - e.last_timestamp_ms >= expiration_ms
        ]:
            del self.producers[producer_id]

    def clear(self) -> None:
        self.producers = {}

    def rebuild(self, snapshot: SegmentsSnapshot, log_start: int, log_end: int) -> None:
        """Kafka's rebuildProducerState: the newest valid snapshot at or below the log end,
        then the batch headers after it (no record is decoded)."""
        loaded = self.latest_loadable(log_end)
        offset = log_start if loaded is None else loaded
        if offset >= log_end:
            return
        replayed = []
        for segment in snapshot.segments[snapshot.floor_index(offset) :]:
            found = segment.translate_offset(offset) if segment.base_offset < offset else None
            for batch in segment.log.batches(0 if found is None else found.position):
                header = batch.header
                if header.last_offset >= offset and header.producer_id >= 0:
                    replayed.append((header, header.base_offset, header.last_offset))
        self.update(producer_batches(replayed))

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
                _ENTRY.pack(
                    producer_id,
                    entry.epoch,
                    last.last_sequence if last else -1,
                    last.last_offset if last else -1,
                    (last.last_offset - last.last_batch_first_offset) if last else 0,
                    entry.last_timestamp_ms,
                    -1,
                    -1,
                )
            )
        body = struct.pack(">i", len(entries)) + b"".join(entries)
        data = struct.pack(">hI", _VERSION, crc32c.crc32c(body)) + body
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
            version, crc, count = _HEAD.unpack_from(data)
            if version != _VERSION:
                raise ValueError(f"unknown version {version}")
            if crc32c.crc32c(data[6:]) != crc:
                raise ValueError("CRC mismatch")
            if len(data) != _HEAD.size + count * _ENTRY.size:
                raise ValueError(f"{count} entries declared, {len(data)} bytes")
        except (struct.error, ValueError) as exc:
            path.unlink(missing_ok=True)
            raise CorruptRecordError(f"producer snapshot {path.name}: {exc}") from None
        producers = {}
        for i in range(count):
            pid, epoch, last_seq, last_offset, delta, timestamp, _, _ = _ENTRY.unpack_from(
                data, _HEAD.size + i * _ENTRY.size
            )
            entry = ProducerEntry(pid, epoch, last_timestamp_ms=timestamp)
            if last_offset >= 0:
                entry.runs.append(
                    BatchMetadata(
                        (last_seq - delta) % (INT_MAX + 1),
                        last_seq,
                        last_offset - delta,
                        last_offset,
                        timestamp,
                        last_offset - delta,
                    )
                )
            producers[pid] = entry
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

    def latest_loadable(self, log_end_offset: int) -> int | None:
        """Load the newest valid snapshot at or below the log end; its offset, or None."""
        for snapshot in reversed(self.snapshot_offsets()):
            if snapshot > log_end_offset:
                self.snapshot_path(snapshot).unlink(missing_ok=True)
                continue
            try:
                self.load_snapshot(snapshot)
                return snapshot
            except (CorruptRecordError, OSError):
                continue
        self.clear()
        return None


def producer_batches(batches: Iterable[tuple[BatchHeader, int, int]]) -> list[ProducerBatch]:
    """(header, first offset, last offset) of appended batches -> the idempotent producers'
    data batches among them (control batches carry no sequence). One entry per batch."""
    return [
        ProducerBatch(
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            last_sequence_of(h.base_sequence, h.last_offset_delta),
            first,
            last,
            h.max_timestamp,
        )
        for h, first, last in batches
        if h.producer_id >= 0 and not h.attributes & CONTROL_MASK
    ]


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == INT_MAX)
