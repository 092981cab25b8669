"""What the producer state keeps of each producer and of each appended batch (Kafka's
ProducerStateEntry, BatchMetadata), and how a batch's header becomes a ProducerBatch. The
rules that use them are in producer_state.py."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import CorruptRecordError
from ..records.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader
from ..records.control import ControlMarker, read_marker

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_EPOCH = -1
INT_MAX = 2**31 - 1


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
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

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
    transactional: bool = False
    marker: ControlMarker | None = None  # a COMMIT/ABORT control batch


@dataclass(frozen=True)
class ActiveProducer:
    """A producer's state as Kafka's DescribeProducers shows it (ProducerStateEntry)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int = -1
    current_txn_start_offset: int = -1


def last_sequence_of(base_sequence: int, last_offset_delta: int) -> int:
    """Sequences wrap past 2^31-1 to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    return (base_sequence + last_offset_delta) % (INT_MAX + 1)


def producer_batch(
    h: BatchHeader, first: int, last: int, marker: ControlMarker | None = None
) -> ProducerBatch | None:
    """What the state needs of one appended batch of a producer: its data batches, and its
    COMMIT/ABORT markers (`marker`, read from the control batch's record); None for a batch
    with no producer id or a control batch that is no marker."""
    control = h.attributes & CONTROL_MASK
    if h.producer_id < 0 or (control and marker is None):
        return None
    return ProducerBatch(
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        last_sequence_of(h.base_sequence, h.last_offset_delta) if not control else -1,
        first,
        last,
        h.max_timestamp,
        bool(h.attributes & TRANSACTIONAL_MASK),
        marker,
    )


def producer_batches(
    batches: Iterable[tuple[BatchHeader, int, int]],
    view: memoryview | None = None,
    positions: Iterable[int] | None = None,
) -> list[ProducerBatch]:
    """(header, first offset, last offset) of appended batches -> the producers' batches
    among them. Markers are read from `view` at `positions` (each batch's), when given;
    without them control batches are left out (the checks before an append need only the
    data batches)."""
    out = []
    where = iter(positions) if positions is not None else None
    for h, first, last in batches:
        position = next(where) if where is not None else -1
        marker = None
        if h.attributes & CONTROL_MASK and view is not None:
            marker = marker_of(view[position : position + h.size_in_bytes], h)
        batch = producer_batch(h, first, last, marker)
        if batch is not None:
            out.append(batch)
    return out


def marker_of(batch: bytes | memoryview, header: BatchHeader) -> ControlMarker | None:
    """The COMMIT/ABORT of a control batch; None for other control types or bad ones."""
    try:
        return read_marker(batch, header)
    except CorruptRecordError:
        return None
