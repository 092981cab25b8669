"""Per-partition wake-ups (Kafka's DelayedOperationPurgatory keyed by partition): whatever
waits for a partition to change — a long-poll fetch, an acks=all append, a follower's fetch
session — registers a `Waiter` for the partitions it cares about, and an append or a
high-watermark move on partition P notifies only P's waiters. `wake_all` is for the rare
events that concern every waiter (the node stopping, fenced or unfenced).

A waiter's `notify` must be cheap and must not block: it runs on the appending thread."""

from __future__ import annotations

import threading
from collections.abc import Iterable

TopicPartition = tuple[str, int]


class Waiter:
    """One waiting call: woken (its event set) when one of its partitions changes, or on a
    wake of every waiter (`partition` None). `wakeups` counts the times it was woken.

    A change is records appended, the high watermark moved, or anything else (both flags
    set: a new leader, a log start moved, a truncation). What waits on the high watermark
    only — a consumer's long poll, which reads below it, and an acks=all append — is not
    woken by an append that did not move it (`wakes_on_records` False): on a replicated
    partition that is every append, and each needless wake costs a thread switch and the
    GIL on the appending node's busiest path."""

    def __init__(self, *, wakes_on_records: bool = True) -> None:
        self.event = threading.Event()
        self.wakeups = 0
        self.wakes_on_records = wakes_on_records

    def notify(
        self, partition: TopicPartition | None, *, records: bool = True, watermark: bool = True
    ) -> None:
        if watermark or (records and self.wakes_on_records):
            self.wakeups += 1
            self.event.set()


class PartitionWaiters:
    """Which waiters wait on which partitions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_partition: dict[TopicPartition, set[Waiter]] = {}
        self._count: dict[Waiter, int] = {}  # every registered waiter: its partitions

    def register(self, waiter: Waiter, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                waiters = self._by_partition.setdefault(tp, set())
                if waiter not in waiters:
                    waiters.add(waiter)
                    self._count[waiter] = self._count.get(waiter, 0) + 1

    def unregister(self, waiter: Waiter, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                waiters = self._by_partition.get(tp)
                if waiters is None or waiter not in waiters:
                    continue
                waiters.discard(waiter)
                if not waiters:
                    del self._by_partition[tp]
                left = self._count[waiter] - 1
                if left:
                    self._count[waiter] = left
                else:
                    del self._count[waiter]

    def wake(self, tp: TopicPartition, *, records: bool = True, watermark: bool = True) -> None:
        """What changed on `tp` (Waiter): records appended, the high watermark moved, or both
        (anything else counts as both)."""
        with self._lock:
            waiters = list(self._by_partition.get(tp, ()))
        for waiter in waiters:
            waiter.notify(tp, records=records, watermark=watermark)

    def wake_all(self) -> None:
        with self._lock:
            waiters = list(self._count)
        for waiter in waiters:
            waiter.notify(None)

    def waiting_on(self, tp: TopicPartition) -> int:
        with self._lock:
            return len(self._by_partition.get(tp, ()))
