"""The KIP-848 server-side assignors, `uniform` and `range`, chosen by a member's
`group.remote.assignor` (ConsumerGroupHeartbeat's ServerAssignor); the group uses the one
most of its members ask for, Kafka's first (`uniform`) when none asks (Kafka's
group.consumer.assignors default: uniform, range).

uniform (Kafka's UniformAssignor): every member gets as many partitions as the others, to
one, over all the topics it subscribes to; sticky: a member keeps the partitions of its last
target assignment that it still subscribes to, up to its share, and only the rest move.
With members subscribing to different topics, each partition goes to the least loaded
member subscribing to its topic, then partitions move from the most to the least loaded
while that narrows the gap (Kafka's heterogeneous builder balances the same way).

range (Kafka's RangeAssignor): per topic, the members subscribing to it, in order of
instance id (static members) then member id, get contiguous ranges: partitions // members
each, the first partitions % members one more; with every member subscribing to the same
topics of the same size the ranges line up across topics (co-partitioning). Kafka 4.x's
range assignor also keeps a member's current range when the member set is unchanged; here
the ranges follow the members' order alone (the same answer whenever the members are).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from seglog.coordinator_errors import UnsupportedAssignorError

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)


@dataclass(frozen=True)
class AssignorMember:
    member_id: str
    instance_id: str | None
    topic_ids: frozenset[str]
    previous: frozenset[tuple[str, int]]  # its last target assignment


def check_assignor(name: str | None) -> None:
    if name is not None and name not in ASSIGNORS:
        raise UnsupportedAssignorError(
            f"ServerAssignor {name!r} is not supported; this coordinator has {', '.join(ASSIGNORS)}"
        )


def preferred(names: Sequence[str | None]) -> str:
    """The assignor most members name (ties: the order of ASSIGNORS), else uniform."""
    counts = {name: names.count(name) for name in ASSIGNORS}
    best = max(ASSIGNORS, key=lambda n: (counts[n], -ASSIGNORS.index(n)))
    return best if counts[best] else UNIFORM


def assign(
    assignor: str, members: Sequence[AssignorMember], partitions: Mapping[str, int]
) -> dict[str, frozenset[tuple[str, int]]]:
    """member id -> its (topic id, partition) pairs; `partitions`: topic id -> count."""
    if assignor == RANGE:
        return _range(members, partitions)
    return _uniform(members, partitions)


def _range(
    members: Sequence[AssignorMember], partitions: Mapping[str, int]
) -> dict[str, frozenset[tuple[str, int]]]:
    out: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
    ordered = sorted(
        members, key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id)
    )
    for topic_id in sorted(partitions):
        readers = [m for m in ordered if topic_id in m.topic_ids]
        if not readers:
            continue
        quota, extra = divmod(partitions[topic_id], len(readers))
        start = 0
        for index, member in enumerate(readers):
            count = quota + (1 if index < extra else 0)
            out[member.member_id].update((topic_id, p) for p in range(start, start + count))
            start += count
    return {member_id: frozenset(pairs) for member_id, pairs in out.items()}


def _uniform(
    members: Sequence[AssignorMember], partitions: Mapping[str, int]
) -> dict[str, frozenset[tuple[str, int]]]:
    by_id = {m.member_id: m for m in members}
    out: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
    wanted = sorted(
        (topic_id, p)
        for topic_id, count in partitions.items()
        if any(topic_id in m.topic_ids for m in members)
        for p in range(count)
    )
    homogeneous = len({m.topic_ids for m in members}) == 1
    if homogeneous and members:
        quota, extra = divmod(len(wanted), len(members))
    else:
        quota, extra = len(wanted), 0
    valid = set(wanted)
    taken: set[tuple[str, int]] = set()
    # Stickiness: each member keeps what it had, up to its share (quota, or quota + 1 while
    # the extra partitions last), members that had most first, as Kafka's builder does.
    for member in sorted(members, key=lambda m: (-len(m.previous), m.member_id)):
        kept = sorted(
            tp
            for tp in member.previous
            if tp in valid and tp[0] in member.topic_ids and tp not in taken
        )
        share = quota
        if homogeneous and extra and len(kept) > quota:
            share, extra = quota + 1, extra - 1
        for tp in kept[:share]:
            out[member.member_id].add(tp)
            taken.add(tp)
    for tp in wanted:
        if tp in taken:
            continue
        readers = [m for m in members if tp[0] in m.topic_ids]
        least = min(readers, key=lambda m: (len(out[m.member_id]), m.member_id))
        out[least.member_id].add(tp)
    _balance(out, by_id)
    return {member_id: frozenset(pairs) for member_id, pairs in out.items()}


def _balance(out: dict[str, set[tuple[str, int]]], by_id: Mapping[str, AssignorMember]) -> None:
    """Move partitions from the most to the least loaded member that may read them while
    that narrows the gap (bounded: each move lowers the sum of squared loads)."""
    for _ in range(sum(len(p) for p in out.values()) + 1):
        moved = False
        for giver in sorted(out, key=lambda m: (-len(out[m]), m)):
            for taker in sorted(out, key=lambda m: (len(out[m]), m)):
                if len(out[giver]) - len(out[taker]) < 2:
                    continue
                movable = sorted(tp for tp in out[giver] if tp[0] in by_id[taker].topic_ids)
                if movable:
                    tp = movable[-1]
                    out[giver].discard(tp)
                    out[taker].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return
