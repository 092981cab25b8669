"""Moving partitions (Kafka's KIP-455 reassignment, as KRaft's ReplicationControlManager does
it) and leader elections on demand (Kafka's ElectLeaders), as registry decisions.

A reassignment of a partition to `target`:
1. start: `replicas` becomes the target followed by the current replicas not in it, with
   `adding` (target - current) and `removing` (current - target) recorded in the partition's
   record. The adding replicas' nodes create the partition and catch up as followers (the
   ordinary follower machinery); their leader adds each to the ISR once it has caught up.
2. complete (the controller's tick, `complete_reassignments`): once every target replica is
   in the ISR, `replicas` becomes the target, the removed replicas leave the ISR, and a leader
   being removed hands over to the first target replica in the ISR that is eligible (a new
   leader epoch). The removed replicas' nodes are told the partition is no longer theirs.
3. cancel: back to the original replicas (`replicas` without `adding`), the ISR cut to them;
   refused when no original replica is in the ISR (it would leave the partition without one).
A new target for a partition being moved replaces the move, counted from its original
replicas. Each step is one batch of records for all the partitions it concerns; since the
state is in the metadata log, a controller elected after a restart completes what is under
way. The ISR, and so min.insync.replicas, is never counted differently during a move.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from seglog.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    PreferredLeaderNotAvailableError,
    SeglogError,
    UnknownTopicOrPartitionError,
)

from ..coordination.election import Fence
from .metadata_image import Topic
from .partition_changes import (
    NO_LEADER,
    Eligible,
    PartitionAssignment,
    PartitionChange,
    change_leader,
    clean_choice,
    elect_leader,
    prefer_others,
)
from .registry_state import RegistryState, retrying

PREFERRED = "preferred"
UNCLEAN = "unclean"
# A partition's requested move: its target replicas, or None to cancel its move.
Target = list[int] | None


@dataclass
class Placement:
    """Where every partition's replicas are, as a balancer must see it at one instant."""

    replicas: dict[PartitionChange, list[int]] = field(default_factory=dict)
    # At rest, with a leader and every replica in sync on an eligible node: may be moved.
    movable: set[PartitionChange] = field(default_factory=set)
    # The partitions being moved, each with its target replicas.
    reassigning: dict[PartitionChange, list[int]] = field(default_factory=dict)
    moves_in_flight: int = 0  # replicas being added by reassignments under way
    eligible_nodes: list[int] = field(default_factory=list)
    # Nodes that hold replicas but are not eligible (down, fenced, shutting down).
    absent_holders: list[int] = field(default_factory=list)
    misled: int = 0  # partitions not led by their preferred replica


def check_target(name: str, target: Sequence[int], known_nodes: set[int]) -> None:
    if not target:
        raise InvalidReplicaAssignmentError(f"{name}: the replica list is empty")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(f"{name}: replicas {list(target)} repeat a node")
    unknown = sorted(set(target) - known_nodes)
    if unknown:
        raise InvalidReplicaAssignmentError(
            f"{name}: replicas {list(target)} name unknown node(s) {unknown} "
            f"(registered: {sorted(known_nodes)})"
        )


def check_not_decommissioned(
    name: str, target: Sequence[int], replicas: Sequence[int], decommissioned: Collection[int]
) -> None:
    """No new replica on a decommissioned node (one it already holds, `replicas` without
    those a move is still adding, may stay in a target, so a move of the partition's other
    replicas is not refused)."""
    refused = sorted(n for n in target if n in decommissioned and n not in replicas)
    if refused:
        raise InvalidReplicaAssignmentError(
            f"{name}: replicas {list(target)} add node(s) {refused}, decommissioned: they take "
            f"no new replica (seglog nodes recommission --node {refused[0]} first)"
        )


def start(
    p: PartitionAssignment,
    target: list[int],
    throttle_bytes_per_s: int,
    eligible: Eligible,
    avoid: Collection[int] = (),
) -> bool:
    """Begin (or replace) the move of `p` to `target`; False when nothing changes."""
    original = [r for r in p.replicas if r not in p.adding]
    adding = [r for r in target if r not in original]
    removing = [r for r in original if r not in target]
    replicas = [*target, *removing]
    isr = [r for r in replicas if r in p.isr]
    throttle = throttle_bytes_per_s if adding else 0
    if (replicas, isr, adding, removing, throttle) == (
        p.replicas,
        p.isr,
        p.adding,
        p.removing,
        p.throttle_bytes_per_s,
    ):
        return False
    if not isr:
        raise InvalidReplicaAssignmentError(
            f"moving to {target} would leave no in-sync replica (ISR {p.isr})"
        )
    p.replicas, p.isr, p.adding, p.removing = replicas, isr, adding, removing
    p.throttle_bytes_per_s = throttle
    p.keep_elr_within_replicas()
    if p.leader != NO_LEADER and p.leader not in replicas:  # a replaced move's new leader
        elect_leader(p, eligible, avoid=avoid)
    else:
        p.partition_epoch += 1
    return True


def cancel(
    name: str, p: PartitionAssignment, eligible: Eligible, avoid: Collection[int] = ()
) -> None:
    if not p.reassigning:
        raise NoReassignmentInProgressError(f"{name} is not being reassigned")
    original = [r for r in p.replicas if r not in p.adding]
    isr = [r for r in original if r in p.isr]
    if not isr:
        raise InvalidReplicaAssignmentError(
            f"{name}: cancelling would leave no in-sync replica (ISR {p.isr}, original "
            f"replicas {original})"
        )
    _settle(p, original, isr, eligible, avoid)


def complete_if_ready(
    p: PartitionAssignment, eligible: Eligible, avoid: Collection[int] = ()
) -> list[int]:
    """Finish the move once every target replica is in the ISR; the replicas removed (none
    while it is not ready, or when a leader being removed has no eligible successor)."""
    target = [r for r in p.replicas if r not in p.removing]
    if not all(r in p.isr for r in target):
        return []
    if p.leader not in target and not any(eligible(r) for r in target):
        return []
    removed = list(p.removing)
    _settle(p, target, [r for r in target if r in p.isr], eligible, avoid)
    return removed


def _settle(
    p: PartitionAssignment,
    replicas: list[int],
    isr: list[int],
    eligible: Eligible,
    avoid: Collection[int],
) -> None:
    p.replicas, p.isr = replicas, isr
    p.adding, p.removing, p.throttle_bytes_per_s = [], [], 0
    p.keep_elr_within_replicas()
    if p.leader not in replicas:
        elect_leader(p, eligible, avoid=avoid)
    else:
        p.partition_epoch += 1


def elect(
    name: str,
    p: PartitionAssignment,
    kind: str,
    eligible: Eligible,
    avoid: Collection[int] = (),
) -> None:
    """Kafka's ElectLeaders for one partition: preferred (the first replica, when it is in the
    ISR and eligible) or unclean (only for a partition without a leader: an in-sync replica
    if one is eligible, else the first eligible replica, whose log becomes the truth)."""
    if kind == PREFERRED:
        preferred = p.replicas[0]
        if p.leader == preferred:
            raise ElectionNotNeededError(f"{name} is led by its preferred replica {preferred}")
        if preferred not in p.isr or not eligible(preferred):
            raise PreferredLeaderNotAvailableError(
                f"{name}: preferred replica {preferred} is not in the ISR {p.isr} or not live"
            )
        if preferred in avoid:
            raise PreferredLeaderNotAvailableError(
                f"{name}: preferred replica {preferred} is on a decommissioned node "
                f"(seglog nodes recommission --node {preferred} to let it lead)"
            )
        change_leader(p, preferred)
        return
    if p.leader != NO_LEADER:
        raise ElectionNotNeededError(f"{name} has a leader (node {p.leader})")
    if clean_choice(p, eligible) != NO_LEADER:  # a clean choice after all (the ISR or ELR)
        elect_leader(p, eligible, avoid=avoid)
        return
    leader = prefer_others([r for r in p.replicas if eligible(r)], avoid)
    if leader == NO_LEADER:
        raise EligibleLeadersNotAvailableError(f"{name}: no replica of {p.replicas} is live")
    p.isr, p.elr = [leader], []  # its log becomes the truth: no other replica is vouched for
    change_leader(p, leader)


class Reassignments:
    """The registry's reassignment and election decisions (the registry's `reassigning`)."""

    def __init__(self, state: RegistryState) -> None:
        self._state = state

    @retrying
    def alter_reassignments(
        self,
        targets: Mapping[PartitionChange, Target],
        throttle_bytes_per_s: int = 0,
        *,
        validate_only: bool = False,
    ) -> dict[PartitionChange, list[int]]:
        """Kafka's AlterPartitionReassignments: every partition checked before anything
        changes (one bad entry refuses the whole request); one batch for all. Returns the
        replicas each changed partition no longer has (a cancel's adding ones)."""
        if throttle_bytes_per_s < 0:
            raise InvalidReplicaAssignmentError(f"throttle {throttle_bytes_per_s} bytes/s < 0")
        with self._state._lock:
            known = set(self._state.nodes)
            working = {}
            for tp, target in targets.items():
                name = f"{tp[0]}-{tp[1]}"
                current = self._state.image.partition(tp)
                if current is None:
                    raise UnknownTopicOrPartitionError(f"{name} does not exist")
                p = working[tp] = current.copy()
                if target is None:
                    cancel(name, p, self._state._eligible, self._state._avoided)
                    continue
                check_target(name, target, known)
                holding = [r for r in current.replicas if r not in current.adding]
                check_not_decommissioned(name, target, holding, self._state._avoided)
                start(
                    p,
                    list(target),
                    throttle_bytes_per_s,
                    self._state._eligible,
                    self._state._avoided,
                )
            removed = {}
            for tp, p in working.items():
                before = self._state.image.partition(tp)
                if before is not None and p != before:
                    removed[tp] = [r for r in before.replicas if r not in p.replicas]
            if removed and not validate_only:
                self._state._commit(self._state._partition_records(working, removed))
        if validate_only:
            return {}
        self._state._notify(set(removed))
        return removed

    def placement(self) -> Placement:
        with self._state._lock:
            placement = Placement(misled=len(self._state.image.misled))
            live = {n for n in self._state.nodes if self._state._eligible(n)}
            # A decommissioned node is no balancer's target, and its replicas are the
            # decommission's to move; but it is up, so it does not stop balancing the rest.
            placement.eligible_nodes = sorted(live - self._state._avoided)
            eligible = set(placement.eligible_nodes)
            placement.absent_holders = sorted(
                n for n, hosted in self._state.image.hosted.items() if hosted and n not in live
            )
            for topic in self._state.image.topics.values():
                for i, p in enumerate(topic.partitions):
                    tp = (topic.name, i)
                    placement.replicas[tp] = list(p.replicas)
                    placement.moves_in_flight += len(p.adding)
                    if p.reassigning:
                        placement.reassigning[tp] = [r for r in p.replicas if r not in p.removing]
                    if (
                        not p.reassigning
                        and p.leader != NO_LEADER
                        and set(p.isr) == set(p.replicas)
                        and eligible.issuperset(p.replicas)
                    ):
                        placement.movable.add(tp)
            return placement

    def reassignments(
        self, wanted: Sequence[PartitionChange] | None = None
    ) -> list[tuple[Topic, int, PartitionAssignment]]:
        """The partitions being moved (of `wanted`, or all), each with its registration."""
        with self._state._lock:
            chosen = self._state.image.reassigning if wanted is None else set(wanted)
            return [
                entry for entry in self._state.partitions_of(sorted(chosen)) if entry[2].reassigning
            ]

    @retrying
    def complete_reassignments(
        self, controller: Fence | None = None
    ) -> dict[PartitionChange, list[int]]:
        """The controller's tick: every move whose target replicas are all in sync finishes,
        in one batch; returns each finished partition's removed replicas."""
        with self._state._lock:
            if not self._state.image.reassigning:
                return {}
            working = self._state._working(self._state.image.reassigning)
            removed = {}
            for tp, p in working.items():
                gone = complete_if_ready(p, self._state._eligible, self._state._avoided)
                if not p.reassigning:
                    removed[tp] = gone
            if removed:
                self._state._commit(self._state._partition_records(working, removed), controller)
        self._state._notify(set(removed))
        return removed

    @retrying
    def elect_leaders(
        self, kind: str, wanted: Sequence[PartitionChange] | None = None
    ) -> dict[PartitionChange, SeglogError | None]:
        """Kafka's ElectLeaders over `wanted` (None: every partition that could use one: not
        led by its preferred replica, or leaderless for unclean); one batch for all."""
        with self._state._lock:
            if wanted is None:
                wanted = sorted(
                    self._state.image.misled if kind == PREFERRED else self._state.image.leaderless
                )
            results: dict[PartitionChange, SeglogError | None] = {}
            working = {}
            for tp in wanted:
                current = self._state.image.partition(tp)
                if current is None:
                    results[tp] = UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} does not exist")
                    continue
                p = current.copy()
                try:
                    elect(f"{tp[0]}-{tp[1]}", p, kind, self._state._eligible, self._state._avoided)
                except SeglogError as exc:
                    results[tp] = exc
                    continue
                working[tp] = p
                results[tp] = None
            if working:
                self._state._commit(self._state._partition_records(working, working))
        self._state._notify(set(working))
        return results
