"""A bounded in-memory history of which partitions changed at which metadata offset, and on
which nodes: it answers a node's heartbeat with only what changed since the offset the node
last received (Kafka's incremental metadata delta), or says it is too old to answer.

Each entry is (offset, topic, partition, replicas before, replicas after): `after` empty
when the partition was removed. An entry is written for every partition record applied, for
every partition of a topic whose configs changed (nodes are told configs with the states),
and for every partition of a removed topic. Past `max_entries` the oldest half is dropped and
`floor` rises to the newest dropped offset: a node behind it gets its whole assignment.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

DEFAULT_MAX_ENTRIES = 100_000  # ten changes of every partition of a 10,000-partition cluster

Entry = tuple[int, str, int, tuple[int, ...], tuple[int, ...]]


@dataclass
class NodeChanges:
    changed: set[tuple[str, int]]  # partitions of the node whose state changed
    removed: set[tuple[str, int]]  # partitions no longer assigned to the node


class MetadataHistory:
    def __init__(self, floor: int, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        # Changes after `floor` are all here; nothing is known of those at or before it.
        self.floor = floor
        self.max_entries = max_entries
        self._offsets: list[int] = []
        self._entries: list[Entry] = []

    def add(
        self,
        offset: int,
        topic: str,
        partition: int,
        before: tuple[int, ...],
        after: tuple[int, ...],
    ) -> None:
        self._offsets.append(offset)
        self._entries.append((offset, topic, partition, before, after))
        if len(self._entries) > self.max_entries:
            self._drop_oldest(len(self._entries) // 2)

    def _drop_oldest(self, count: int) -> None:
        newest_dropped = self._offsets[count - 1]
        keep = bisect.bisect_right(self._offsets, newest_dropped)  # one offset goes whole
        self.floor = newest_dropped
        del self._offsets[:keep]
        del self._entries[:keep]

    def since(self, node_id: int, offset: int) -> NodeChanges | None:
        """What changed for `node_id` after `offset`; None when the history no longer (or
        never) reaches back that far."""
        if offset < self.floor:
            return None
        changes = NodeChanges(set(), set())
        for _, topic, partition, before, after in self._entries[
            bisect.bisect_right(self._offsets, offset) :
        ]:
            tp = (topic, partition)
            if node_id in after:
                changes.changed.add(tp)
                changes.removed.discard(tp)
            elif node_id in before:
                changes.removed.add(tp)
                changes.changed.discard(tp)
        return changes

    def __len__(self) -> int:
        return len(self._entries)
