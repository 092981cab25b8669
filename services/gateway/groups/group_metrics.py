"""The groups' gauges, read at each export (never on a request's path): how many groups this
gateway coordinates per protocol and state (Kafka's classic states, KIP-848's Empty,
Assigning, Reconciling, Stable), and each group's members per protocol they speak (a
KIP-848 group in the middle of an online migration has both). Lag per group and partition
is gateway_metrics.py's `seglog.consumer.lag`, from the committed offsets, for both kinds.

    seglog.groups         {seglog.group.protocol, seglog.group.state}
    seglog.group.members  {messaging.consumer.group.name, seglog.group.protocol}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from opentelemetry.metrics import Observation

from seglog.metrics import RequestMetrics
from seglog.semconv import GROUP

from .consumer_groups import ConsumerGroups
from .coordinator import GroupCoordinator

PROTOCOL = "seglog.group.protocol"
STATE = "seglog.group.state"
CLASSIC_PROTOCOL, CONSUMER_PROTOCOL = "classic", "consumer"


def groups(coordinator: GroupCoordinator, consumer_groups: ConsumerGroups) -> Iterator[Observation]:
    counts: Counter[tuple[str, str]] = Counter()
    for group_id in coordinator.group_ids():
        group = coordinator.snapshot(group_id)
        if group is not None:
            counts[(CLASSIC_PROTOCOL, group.state)] += 1
    for consumer_group in consumer_groups.snapshots():
        counts[(CONSUMER_PROTOCOL, consumer_group.state)] += 1
    for (protocol, state), count in sorted(counts.items()):
        yield Observation(count, {PROTOCOL: protocol, STATE: state})


def members(
    coordinator: GroupCoordinator, consumer_groups: ConsumerGroups
) -> Iterator[Observation]:
    for group_id in coordinator.group_ids():
        group = coordinator.snapshot(group_id)
        if group is not None and group.members:
            yield Observation(len(group.members), {GROUP: group_id, PROTOCOL: CLASSIC_PROTOCOL})
    for consumer_group in consumer_groups.snapshots():
        speaking = Counter(
            CLASSIC_PROTOCOL if m.classic is not None else CONSUMER_PROTOCOL
            for m in consumer_group.members.values()
        )
        for protocol, count in sorted(speaking.items()):
            yield Observation(count, {GROUP: consumer_group.group_id, PROTOCOL: protocol})


def register(
    metrics: RequestMetrics, coordinator: GroupCoordinator, consumer_groups: ConsumerGroups
) -> None:
    metrics.gauge(
        "seglog.groups",
        "{group}",
        "consumer groups this gateway coordinates, per protocol and state",
        lambda: groups(coordinator, consumer_groups),
    )
    metrics.gauge(
        "seglog.group.members",
        "{member}",
        "a consumer group's members, per protocol they speak",
        lambda: members(coordinator, consumer_groups),
    )
