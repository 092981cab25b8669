"""Share groups' metrics, read at each export from the share partitions this gateway holds
(never counted on the fetch path):

  seglog.share.records.in_flight     gauge per group and partition: records acquired now
  seglog.share.records.available     gauge per group and partition: released records
                                     waiting to be delivered again
  seglog.share.records.redelivered   counter: deliveries of a record delivered before
  seglog.share.records.archived      counter: records archived at the delivery limit
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
