"""How a partition's registration changes (Kafka's PartitionRegistration and
PartitionChangeBuilder, with KRaft's ReplicationControlManager checks): elections, fencing,
ISR changes asked for by leaders, preferred leaders, and where new replicas go. The registry
calls these with its lock held and persists what they changed; `eligible(node)` says whether
a node may lead or join an ISR (registered, live, not fenced, not shutting down).

- A leader change bumps the leader epoch; every change bumps the partition epoch.
- Clean election: the first replica, in assignment order, that is in the ISR and eligible.
  None: leader -1 (the partition is offline) and the last ISR member is kept, so it is
  elected when it returns (unclean election is off).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from seglog.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
)

NO_LEADER = -1
PartitionChange = tuple[str, int]  # (topic, partition) whose registration changed
Eligible = Callable[[int], bool]
Registrations = Iterable[tuple[PartitionChange, "PartitionAssignment"]]


@dataclass
class PartitionAssignment:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = 0
    # A reassignment in progress (Kafka's addingReplicas/removingReplicas, KIP-455): the
    # target is `replicas` without `removing`; the original, `replicas` without `adding`.
    # The throttle (bytes/s) bounds the adding replicas' catch-up fetches; 0: none.
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)
    throttle_bytes_per_s: int = 0

    def __post_init__(self) -> None:
        if not self.isr:
            self.isr = list(self.replicas)

    def copy(self) -> PartitionAssignment:
        return PartitionAssignment(
            list(self.replicas),
            self.leader,
            self.leader_epoch,
            list(self.isr),
            self.partition_epoch,
            list(self.adding),
            list(self.removing),
            self.throttle_bytes_per_s,
        )

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def to_json(self) -> dict[str, object]:
        registration: dict[str, object] = {
            "replicas": self.replicas,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": self.isr,
            "partition_epoch": self.partition_epoch,
        }
        if self.reassigning:  # absent otherwise: records of a partition at rest stay as they were
            registration["adding_replicas"] = self.adding
            registration["removing_replicas"] = self.removing
            registration["throttle_bytes_per_s"] = self.throttle_bytes_per_s
        return registration


def choose_leader(p: PartitionAssignment, eligible: Eligible, exclude: int | None = None) -> int:
    for replica in p.replicas:
        if replica != exclude and replica in p.isr and eligible(replica):
            return replica
    return NO_LEADER


def change_leader(p: PartitionAssignment, leader: int) -> None:
    p.leader = leader
    p.leader_epoch += 1
    p.partition_epoch += 1


def fence(partitions: Registrations, node_id: int, eligible: Eligible) -> set[PartitionChange]:
    """The node leaves every ISR where another member remains, and its leaderships are
    elected anew without it."""
    changed = set()
    for tp, p in partitions:
        if node_id not in p.replicas:
            continue
        moved = False
        if node_id in p.isr and len(p.isr) > 1:
            p.isr.remove(node_id)
            moved = True
        if p.leader == node_id:
            change_leader(p, choose_leader(p, eligible, exclude=node_id))
            changed.add(tp)
        elif moved:
            p.partition_epoch += 1
            changed.add(tp)
    return changed


def elect_leaderless(partitions: Registrations, eligible: Eligible) -> set[PartitionChange]:
    changed = set()
    for tp, p in partitions:
        if p.leader == NO_LEADER:
            leader = choose_leader(p, eligible)
            if leader != NO_LEADER:
                change_leader(p, leader)
                changed.add(tp)
    return changed


def restore_preferred(partitions: Registrations, eligible: Eligible) -> set[PartitionChange]:
    """Kafka's preferred-leader election: the first replica leads again when it is in the
    ISR and eligible."""
    changed = set()
    for tp, p in partitions:
        preferred = p.replicas[0]
        if p.leader != preferred and preferred in p.isr and eligible(preferred):
            change_leader(p, preferred)
            changed.add(tp)
    return changed


def alter_isr(
    p: PartitionAssignment,
    name: str,
    node_id: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: list[int],
    eligible: Eligible,
) -> None:
    """Kafka's AlterPartition as the controller validates it; an error changes nothing."""
    if leader_epoch < p.leader_epoch:
        raise FencedLeaderEpochError(
            f"{name}: AlterPartition at leader epoch {leader_epoch}, the partition is at "
            f"{p.leader_epoch}"
        )
    if node_id != p.leader or leader_epoch != p.leader_epoch:
        raise InvalidRequestError(
            f"{name}: node {node_id} at leader epoch {leader_epoch} is not its leader "
            f"(node {p.leader}, epoch {p.leader_epoch})"
        )
    if partition_epoch != p.partition_epoch:
        raise InvalidUpdateVersionError(
            f"{name}: AlterPartition at partition epoch {partition_epoch}, the partition is "
            f"at {p.partition_epoch}"
        )
    if (
        len(set(new_isr)) != len(new_isr)
        or not set(new_isr) <= set(p.replicas)
        or (node_id not in new_isr)
    ):
        raise InvalidRequestError(
            f"{name}: ISR {new_isr} must be distinct replicas of {p.replicas} including the "
            f"leader {node_id}"
        )
    for replica in set(new_isr) - set(p.isr):
        if not eligible(replica):
            raise IneligibleReplicaError(
                f"{name}: replica {replica} cannot join the ISR: its node is not live"
            )
    p.isr = [r for r in p.replicas if r in new_isr]  # assignment order
    p.partition_epoch += 1


def place(
    count: int,
    replication_factor: int,
    nodes: list[int],
    leader_counts: dict[int, int],
    replica_counts: dict[int, int],
) -> list[PartitionAssignment]:
    """Replicas on distinct nodes: the leader where fewest partitions are led, the
    followers where fewest replicas are held (ties: the next ids after the leader, so equal
    loads spread round the ring)."""
    leaders = {n: leader_counts.get(n, 0) for n in nodes}
    held = {n: replica_counts.get(n, 0) for n in nodes}
    ring = max(nodes, default=0) + 1
    placed = []
    for _ in range(count):
        leader = min(nodes, key=lambda n: (leaders[n], held[n], n))
        followers = sorted(
            (n for n in nodes if n != leader),
            key=lambda n: (held[n], (n - leader) % ring),
        )[: replication_factor - 1]
        leaders[leader] += 1
        for n in (leader, *followers):
            held[n] += 1
        replicas = [leader, *followers]
        placed.append(PartitionAssignment(replicas, leader, 0, list(replicas), 0))
    return placed
