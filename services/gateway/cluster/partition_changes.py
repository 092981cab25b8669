"""How a partition's registration changes (Kafka's PartitionRegistration and
PartitionChangeBuilder, with KRaft's ReplicationControlManager checks): elections, fencing,
ISR changes asked for by leaders, preferred leaders, and where new replicas go. The registry
calls these with its lock held and persists what they changed; `eligible(node)` says whether
a node may lead or join an ISR (registered, live, not fenced, not shutting down).

- A leader change bumps the leader epoch; every change bumps the partition epoch.
- Clean election: the first replica, in assignment order, that is in the ISR and eligible;
  else the first eligible one of the eligible leader replicas (below). A decommissioned
  node (`avoid`) is chosen only when no other replica can be: it is up and holds the
  committed records, and an offline partition would refuse writes for nothing. None: leader -1 (the
  partition is offline) and the last ISR member is kept, so it is elected when it returns
  (unclean election is off).

Eligible leader replicas (ELR, Kafka's KIP-966). The ISR and ELR together are the replicas
known to hold every committed record (everything below the high watermark), so any of them
may lead without losing an acknowledged one:
- A replica that leaves the ISR while the ISR drops below the topic's effective
  min.insync.replicas (min of the setting and the replica count) joins the ELR: it held
  every committed record, and the leader's high watermark stays put while the ISR is below
  min ISR (partition.py), so it still holds them. Above min ISR it does not: records
  committed later are not on it.
- The ELR empties once the ISR reaches min ISR again; a replica rejoining the ISR leaves it.
- A leader elected from the ELR becomes the ISR alone; the former ISR members, which hold
  the committed records too, join the ELR.
- A node back from an unclean shutdown (no clean-shutdown marker: it may have lost
  unflushed writes, its page cache gone with a power cut) holds nothing it can vouch for:
  it leaves the ELR, and the ISR even as its last member when another replica holds the
  committed records (the ELR). Kafka's "last replica standing" problem: without this it
  would be elected with a log cut short and its followers would truncate to it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
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
MinIsr = Callable[[str], int]  # a topic's min.insync.replicas, as the registry knows it
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
    # Eligible leader replicas (KIP-966), in assignment order; empty while the ISR is at or
    # above min ISR.
    elr: list[int] = field(default_factory=list)

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
            list(self.elr),
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
        if self.elr:  # absent otherwise, as the reassignment's fields are
            registration["eligible_leader_replicas"] = self.elr
        return registration

    def effective_min_isr(self, min_isr: int) -> int:
        return min(min_isr, len(self.replicas))

    def in_assignment_order(self, members: set[int]) -> list[int]:
        return [r for r in self.replicas if r in members]

    def leave_isr(self, node_id: int, min_isr: int) -> None:
        """The node leaves the ISR (where another member remains); it joins the ELR when the
        ISR is then below min ISR."""
        if node_id not in self.isr or len(self.isr) == 1:
            return
        self.isr.remove(node_id)
        if len(self.isr) < self.effective_min_isr(min_isr):
            self.elr = self.in_assignment_order(set(self.elr) | {node_id})

    def set_isr(self, isr: list[int], min_isr: int) -> None:
        """A new ISR (an AlterPartition): members removed while it is below min ISR join the
        ELR, members added leave it, and it empties at min ISR."""
        removed = set(self.isr) - set(isr)
        self.isr = self.in_assignment_order(set(isr))
        if len(self.isr) >= self.effective_min_isr(min_isr):
            self.elr = []
        else:
            self.elr = self.in_assignment_order((set(self.elr) | removed) - set(self.isr))

    def keep_elr_within_replicas(self) -> None:
        self.elr = [r for r in self.elr if r in self.replicas]


def choose_leader(
    p: PartitionAssignment,
    eligible: Eligible,
    exclude: int | None = None,
    avoid: Collection[int] = (),
) -> int:
    """The first in-sync eligible replica, one not in `avoid` (decommissioned) if any."""
    return prefer_others(
        [r for r in p.replicas if r != exclude and r in p.isr and eligible(r)], avoid
    )


def prefer_others(candidates: list[int], avoid: Collection[int]) -> int:
    """A decommissioned node leads only where no other candidate can: making the partition
    offline instead would stop writes while that node is up and holds every committed record
    (as a cordoned broker in Kafka, KIP-1066, keeps its leaderships)."""
    for candidate in candidates:
        if candidate not in avoid:
            return candidate
    return candidates[0] if candidates else NO_LEADER


def change_leader(p: PartitionAssignment, leader: int) -> None:
    p.leader = leader
    p.leader_epoch += 1
    p.partition_epoch += 1


def clean_choice(
    p: PartitionAssignment,
    eligible: Eligible,
    exclude: int | None = None,
    avoid: Collection[int] = (),
) -> int:
    """Clean election's choice, changing nothing: from the ISR, else from the ELR (in each,
    a node not in `avoid` first)."""
    leader = choose_leader(p, eligible, exclude, avoid)
    if leader == NO_LEADER:
        leader = prefer_others(
            [r for r in p.replicas if r in p.elr and r != exclude and eligible(r)], avoid
        )
    return leader


def elect_leader(
    p: PartitionAssignment,
    eligible: Eligible,
    exclude: int | None = None,
    avoid: Collection[int] = (),
) -> int:
    """Clean election (`exclude`: the leader stepping down; `avoid`: decommissioned nodes,
    chosen only when no other can lead); the leader chosen, NO_LEADER when none is
    eligible."""
    leader = clean_choice(p, eligible, exclude, avoid)
    if leader != NO_LEADER and leader not in p.isr:
        # From the ELR: it becomes the ISR alone, and the ISR's members, which hold the
        # committed records too, join the ELR.
        p.elr = p.in_assignment_order((set(p.elr) | set(p.isr)) - {leader})
        p.isr = [leader]
    change_leader(p, leader)
    return leader


def fence(
    partitions: Registrations,
    node_id: int,
    eligible: Eligible,
    min_isr: MinIsr,
    avoid: Collection[int] = (),
) -> set[PartitionChange]:
    """The node leaves every ISR where another member remains (for the ELR when that takes
    the ISR below min ISR), and its leaderships are elected anew without it."""
    changed = set()
    for tp, p in partitions:
        if node_id not in p.replicas:
            continue
        before = (list(p.isr), list(p.elr))
        p.leave_isr(node_id, min_isr(tp[0]))
        if p.leader == node_id:
            elect_leader(p, eligible, exclude=node_id, avoid=avoid)
            changed.add(tp)
        elif (p.isr, p.elr) != before:
            p.partition_epoch += 1
            changed.add(tp)
    return changed


def forget_unclean(
    partitions: Registrations, node_id: int, eligible: Eligible, avoid: Collection[int] = ()
) -> set[PartitionChange]:
    """After `fence`, for a node back from an unclean shutdown (its log may be cut short):
    it leaves the ELR, and the ISR even as its last member when the ELR holds the committed
    records; a leader is then elected from the ELR, or, none of it live yet, the ELR becomes
    the ISR to elect from when one returns. With no ELR the last member stays: no other
    replica is known to hold more, and it is elected as before (unclean election is off)."""
    changed = set()
    for tp, p in partitions:
        was_in_elr = node_id in p.elr
        p.elr = [r for r in p.elr if r != node_id]
        leaves_isr = node_id in p.isr and (len(p.isr) > 1 or bool(p.elr))
        if not (was_in_elr or leaves_isr):
            continue
        if leaves_isr:
            p.isr = [r for r in p.isr if r != node_id]
        if p.leader == node_id or (
            p.leader == NO_LEADER and clean_choice(p, eligible, node_id) != NO_LEADER
        ):
            elect_leader(p, eligible, exclude=node_id, avoid=avoid)
        else:
            p.partition_epoch += 1
        if not p.isr:
            p.isr, p.elr = p.elr, []
        changed.add(tp)
    return changed


def elect_leaderless(
    partitions: Registrations, eligible: Eligible, avoid: Collection[int] = ()
) -> set[PartitionChange]:
    changed = set()
    for tp, p in partitions:
        if p.leader == NO_LEADER and clean_choice(p, eligible) != NO_LEADER:
            elect_leader(p, eligible, avoid=avoid)
            changed.add(tp)
    return changed


def restore_preferred(
    partitions: Registrations, eligible: Eligible, avoid: Collection[int] = ()
) -> set[PartitionChange]:
    """Kafka's preferred-leader election: the first replica leads again when it is in the
    ISR and eligible (and not decommissioned: `avoid`)."""
    changed = set()
    for tp, p in partitions:
        preferred = p.replicas[0]
        if (
            p.leader != preferred
            and preferred in p.isr
            and eligible(preferred)
            and preferred not in avoid
        ):
            change_leader(p, preferred)
            changed.add(tp)
    return changed


def hand_over(
    partitions: Registrations, node_id: int, eligible: Eligible, avoid: Collection[int]
) -> set[PartitionChange]:
    """A node decommissioned: each partition it leads goes to another in-sync replica that
    is eligible, where there is one (the node stays in every ISR: it still serves as a
    follower until its replicas are moved off). Where it is the only one it keeps leading."""
    changed = set()
    for tp, p in partitions:
        if p.leader != node_id:
            continue
        leader = choose_leader(p, eligible, exclude=node_id, avoid=avoid)
        if leader != NO_LEADER and leader not in avoid:
            change_leader(p, leader)
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
    min_isr: int,
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
    p.set_isr(new_isr, min_isr)
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
