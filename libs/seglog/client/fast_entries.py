"""The accumulator's open batches as `send`'s C path reads them (records/_encode.c
`send_value` and `send_keyed`), without the accumulator's lock.

An entry is a batch's (writer, result, topic, partition, callbacks) tuple
(ProducerBatch.fast_entry). `sticky` holds per topic the entry of its sticky batch;
`open_by_partition` per topic a list, indexed by partition, of each partition's last batch's.
The accumulator publishes and withdraws entries while it holds its lock. An entry is not
taken back when its batch closes: closing builds the batch, which seals its writer
(section()), and the C path adds nothing to a sealed writer, so a stale entry only sends
`send` to its checked path. An entry is withdrawn where the lock's holder counts a batch's
records and must not see the count move (`append_many`).
"""

from __future__ import annotations

from .futures import RecordFuture
from .producer_batch import ProducerBatch

try:
    from ..records._encode import send_keyed as send_keyed
    from ..records._encode import send_value as send_value
    from ..records._encode import use_future_type

    use_future_type(RecordFuture)
    FAST_SEND = True
except ImportError:  # the C module is not built: `send` takes try_append, never these
    send_keyed = send_value = None  # type: ignore[assignment]
    FAST_SEND = False

Entry = tuple[object, ...]


class FastEntries:
    __slots__ = ("sticky", "open_by_partition")

    def __init__(self) -> None:
        self.sticky: dict[str, Entry] = {}
        self.open_by_partition: dict[str, list[Entry | None]] = {}

    def open(self, batch: ProducerBatch) -> None:
        """`batch` is its partition's newest: keyed records may go to it."""
        entry = batch.fast_entry
        if entry is None:
            return
        entries = self.open_by_partition.get(batch.topic)
        if entries is None:
            entries = self.open_by_partition[batch.topic] = []
        if len(entries) <= batch.partition:
            entries.extend([None] * (batch.partition + 1 - len(entries)))
        entries[batch.partition] = entry

    def stick(self, batch: ProducerBatch) -> None:
        """`batch` takes its topic's unkeyed records."""
        if batch.fast_entry is not None:
            self.sticky[batch.topic] = batch.fast_entry

    def withdraw(self, batch: ProducerBatch) -> None:
        """`batch` out of the C path's reach."""
        entry = batch.fast_entry
        if entry is None:
            return
        if self.sticky.get(batch.topic) is entry:
            del self.sticky[batch.topic]
        entries = self.open_by_partition.get(batch.topic)
        if (
            entries is not None
            and batch.partition < len(entries)
            and entries[batch.partition] is entry
        ):
            entries[batch.partition] = None

    def clear(self) -> None:
        """Closing: every `send` takes the checked path (which refuses it)."""
        self.sticky.clear()
        self.open_by_partition.clear()
