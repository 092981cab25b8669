"""Share groups' metrics, read at each export from the share partitions this gateway holds
(never counted on the fetch path):

  seglog.share.records.in_flight     gauge per group and partition: records acquired now
  seglog.share.records.available     gauge per group and partition: released records
                                     waiting to be delivered again
  seglog.share.records.redelivered   counter: deliveries of a record delivered before
  seglog.share.records.archived      counter: records archived at the delivery limit
  seglog.share.dead_letters.written  counter per group: records written to its dead-letter
                                     topic (KIP-1191)
  seglog.share.dead_letters.failed   counter per group: records whose dead-letter write
                                     failed (kept and tried again)
  seglog.share.dead_letters.dropped  counter per group: records archived without a copy (its
                                     topic missing, or not errors.deadletterqueue.group.enable)
"""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry.metrics import Observation

from seglog.metrics import RequestMetrics
from seglog.semconv import GROUP, PARTITION, TOPIC

from .share_core import ShareGroups


def in_flight(share: ShareGroups) -> Iterator[Observation]:
    for (group, topic, partition), state in share.states.loaded():
        yield Observation(
            state.in_flight(), {GROUP: group, TOPIC: topic, PARTITION: str(partition)}
        )


def available(share: ShareGroups) -> Iterator[Observation]:
    for (group, topic, partition), state in share.states.loaded():
        yield Observation(state.waiting(), {GROUP: group, TOPIC: topic, PARTITION: str(partition)})


def redelivered(share: ShareGroups) -> int:
    return sum(state.redelivered for _, state in share.states.loaded())


def archived(share: ShareGroups) -> int:
    return sum(state.archived_at_limit for _, state in share.states.loaded())


def dead_letters(share: ShareGroups, kind: str) -> Iterator[Observation]:
    """`kind`: written, failed or dropped."""
    queue = share.router.local.dead_letters
    if queue is None:
        return
    counts: dict[str, int] = getattr(queue.records_by_group(), kind)
    for group, records in counts.items():
        yield Observation(records, {GROUP: group})


def register(metrics: RequestMetrics, share: ShareGroups) -> None:
    metrics.gauge(
        "seglog.share.records.in_flight",
        "{message}",
        "records of a share partition acquired by members now",
        lambda: in_flight(share),
    )
    metrics.gauge(
        "seglog.share.records.available",
        "{message}",
        "released records of a share partition waiting to be delivered again",
        lambda: available(share),
    )
    metrics.observed_counter(
        "seglog.share.records.redelivered",
        "{message}",
        "deliveries of records delivered before (released, or their lock lapsed)",
        lambda: redelivered(share),
    )
    metrics.observed_counter(
        "seglog.share.records.archived",
        "{message}",
        "records archived after group.share.delivery.count.limit deliveries",
        lambda: archived(share),
    )
    for kind, description in (
        ("written", "records written to the share group's dead-letter topic"),
        ("failed", "records whose dead-letter write failed (kept and tried again)"),
        ("dropped", "records archived without a dead-letter copy (no usable topic)"),
    ):
        metrics.observed_counters(
            f"seglog.share.dead_letters.{kind}",
            "{message}",
            description,
            lambda kind=kind: dead_letters(share, kind),  # type: ignore[misc]
        )
