"""Kafka's two classic partition assignors, run by the coordinator.

range       per topic, the topic's subscribers sorted by member id each take a contiguous
            run of partitions; the first (partitions % members) take one extra.
roundrobin  every subscribed (topic, partition), sorted, dealt to the members in member-id
            order, skipping a member not subscribed to that topic.
"""

from __future__ import annotations

from collections.abc import Mapping

Assignment = dict[str, dict[str, list[int]]]  # member id -> topic -> partitions


def range_assign(
    subscriptions: Mapping[str, tuple[str, ...]], partitions: Mapping[str, int]
) -> Assignment:
    out: Assignment = {member: {} for member in subscriptions}
    for topic in sorted(partitions):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        count = partitions[topic]
        per_member, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            n = per_member + (1 if i < extra else 0)
            if n:
                out[member][topic] = list(range(start, start + n))
            start += n
    return out


def roundrobin_assign(
    subscriptions: Mapping[str, tuple[str, ...]], partitions: Mapping[str, int]
) -> Assignment:
    out: Assignment = {member: {} for member in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    turn = 0
    for topic in sorted(partitions):
        for partition in range(partitions[topic]):
            for _ in range(len(members)):
                member = members[turn % len(members)]
                turn += 1
                if topic in subscriptions[member]:
                    out[member].setdefault(topic, []).append(partition)
                    break
    return out


ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign}
