"""The share-group workload's checker (tests/faults/share_workload.py writes the history):
pure functions over the merged history, as checker.py's are for producers and consumers.

What a share group promises, checked per record (partition, offset):

    share-acked-twice        two acknowledgements of one record both confirmed
    share-after-ack          a record delivered again after its acknowledgement was confirmed
    share-count-lost         a delivery whose count is not above every earlier delivery's of
                             that record (a count lost in a failover repeats one)
    share-never-done         a record that should have been read (`expected`) was neither
                             acknowledged (confirmed, or sent with its outcome unknown and
                             not delivered again) nor delivered `delivery_limit` times
                             (then archived):
                             delivered until acknowledged fails when locks are never released
                             (a member's death must free what it held) or records are lost

History events (`f`, value):
    share-fetch   ok {"records": [[partition, offset, delivery_count], ...]}
    share-ack     invoke / ok / fail / info {"records": [[partition, offset], ...]}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.faults.checker import EXAMPLES_PER_CLASS, EventLike

ACKED_TWICE = "share-acked-twice"
AFTER_ACK = "share-after-ack"
COUNT_LOST = "share-count-lost"
NEVER_DONE = "share-never-done"
SHARE_ANOMALIES = (ACKED_TWICE, AFTER_ACK, COUNT_LOST, NEVER_DONE)

Record = tuple[int, int]  # (partition, offset)


@dataclass
class ShareVerdict:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SHARE_ANOMALIES, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    deliveries: int = 0
    acknowledged: int = 0

    def add(self, anomaly: str, example: str) -> None:
        self.counts[anomaly] += 1
        if len(self.examples[anomaly]) < EXAMPLES_PER_CLASS:
            self.examples[anomaly].append(example)

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def summary(self) -> str:
        counts = ", ".join(f"{name} {count}" for name, count in self.counts.items())
        return (
            f"{'VALID' if self.ok else 'INVALID'}: {self.deliveries} share deliveries, "
            f"{self.acknowledged} records acknowledged; {counts}"
        )


def check_share(
    history: Iterable[EventLike], expected: Iterable[Record] = (), delivery_limit: int = 0
) -> ShareVerdict:
    """The verdict on a history ordered by time (history.read_history). `expected`: the
    records that must end done; `delivery_limit`: the group's delivery count limit (0: no
    record may be archived, every expected one must be acknowledged)."""
    verdict = ShareVerdict()
    acked_at: dict[Record, str] = {}
    counts: dict[Record, list[int]] = defaultdict(list)
    unknown: set[Record] = set()  # acknowledgements sent, outcome not known (yet)
    for event in history:
        if event.f == "share-fetch" and event.type == "ok":
            for partition, offset, count in event.value["records"]:
                record = (partition, offset)
                verdict.deliveries += 1
                if record in acked_at:
                    verdict.add(
                        AFTER_ACK,
                        f"{record} delivered to {event.process} (count {count}) after its "
                        f"acknowledgement by {acked_at[record]} was confirmed",
                    )
                if counts[record] and count <= max(counts[record]):
                    verdict.add(
                        COUNT_LOST,
                        f"{record} delivered to {event.process} with count {count} after "
                        f"counts {counts[record]}",
                    )
                counts[record].append(count)
                unknown.discard(record)  # delivered again: that acknowledgement did not apply
        elif event.f == "share-ack" and event.type in ("invoke", "fail"):
            for partition, offset in event.value["records"]:
                if event.type == "invoke":
                    unknown.add((partition, offset))
                else:
                    unknown.discard((partition, offset))
        elif event.f == "share-ack" and event.type == "ok":
            for partition, offset in event.value["records"]:
                record = (partition, offset)
                if record in acked_at:
                    verdict.add(
                        ACKED_TWICE,
                        f"{record} acknowledged by {acked_at[record]} and again by {event.process}",
                    )
                    continue
                acked_at[record] = event.process
                unknown.discard(record)
    verdict.acknowledged = len(acked_at)
    for record in expected:
        archived = delivery_limit > 0 and max(counts[record], default=0) >= delivery_limit
        if record not in acked_at and record not in unknown and not archived:
            verdict.add(
                NEVER_DONE,
                f"{record} never acknowledged (delivery counts {counts.get(record, [])})",
            )
    return verdict
