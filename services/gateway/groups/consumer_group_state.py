"""A KIP-848 consumer group's state, as Kafka's coordinator keeps it (ConsumerGroup,
ConsumerGroupMember): the group epoch (bumped when a member joins, leaves or changes its
subscription, or a subscribed topic changes), the target assignment and its epoch (the
assignor's answer for a group epoch), and per member its epoch, its current assignment and
the partitions it still has to revoke. Partitions are keyed by topic id (the registry's
string form), as the records in `__consumer_offsets` key them.

Incremental reconciliation (Kafka's CurrentAssignmentBuilder) brings each member from its
current assignment to its target one, without stopping the group:
- partitions it has and the target keeps stay;
- partitions it has that the target gives away are revoked first: the member stays at its
  epoch (state UNREVOKED_PARTITIONS) until a heartbeat's owned partitions no longer hold
  them (or its rebalance timeout ends it);
- partitions the target gives it are handed over only once no other member holds them
  (assigned or pending revocation); until then it is at the new epoch in state
  UNRELEASED_PARTITIONS and gets them on a later heartbeat.
So a partition is never owned by two members at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

STABLE = 0  # Kafka's MemberState values, as the current-assignment record stores them
UNREVOKED_PARTITIONS = 1
UNRELEASED_PARTITIONS = 2
MEMBER_STATE_NAMES = {
    STABLE: "stable",
    UNREVOKED_PARTITIONS: "unrevoked_partitions",
    UNRELEASED_PARTITIONS: "unreleased_partitions",
}

# Kafka's ConsumerGroup states, as ConsumerGroupDescribe and ListGroups name them.
GROUP_EMPTY = "Empty"
GROUP_ASSIGNING = "Assigning"
GROUP_RECONCILING = "Reconciling"
GROUP_STABLE = "Stable"

LEAVE_EPOCH = -1  # a member leaving for good
STATIC_LEAVE_EPOCH = -2  # a static member leaving for a while (its place is kept)

Assignment = dict[str, frozenset[int]]  # topic id -> partitions


@dataclass(frozen=True)
class ClassicMetadata:
    """A member of a consumer group that speaks the classic protocol (JoinGroup, SyncGroup,
    Heartbeat), as Kafka's ClassicMemberMetadata: its session timeout and its protocols as
    (name, subscription bytes), preference order kept."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass
class ConsumerMember:
    member_id: str
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    topics: tuple[str, ...] = ()
    regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # The member epoch at which it got each partition it holds (Kafka 4.3's AssignmentEpochs):
    # a commit from an epoch before its current one is taken for partitions it held then.
    assignment_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    # time.monotonic() of its last heartbeat; and when its revocation must be done by.
    last_heartbeat: float = 0.0
    revoke_deadline: float | None = None
    # A classic-protocol member (online migration, group_migration.py); None for KIP-848's.
    classic: ClassicMetadata | None = None
    # A classic member's JoinGroup or SyncGroup due by then (Kafka's join and sync timeouts).
    classic_deadline: float | None = None
    # Of the topics its regex matched (`regex_checked`), those its principal may Describe:
    # its regex resolves to these only (consumer_group_targets.py). None: not filtered (no
    # authorizer, or not checked since a coordinator failover: its next heartbeat checks).
    regex_allowed: frozenset[str] | None = None
    regex_checked: frozenset[str] | None = None
    regex_checked_at: float = 0.0  # time.monotonic()

    def metadata_key(self) -> tuple[object, ...]:
        """What the member-metadata record holds: when it changes, the record is written."""
        return (
            self.client_id,
            self.client_host,
            self.instance_id,
            self.rack_id,
            self.topics,
            self.regex,
            self.server_assignor,
            self.rebalance_timeout_ms,
            self.classic,
        )

    def assignment_key(self) -> tuple[object, ...]:
        return (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            _frozen(self.assigned),
            _frozen(self.pending_revocation),
        )


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> assignment
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # The subscribed topics as the last target assignment saw them: name -> (id, partitions).
    # A change (a topic created, deleted, grown) bumps the group epoch.
    topic_metadata: dict[str, tuple[str, int]] = field(default_factory=dict)
    assignor: str = ""

    @property
    def state(self) -> str:
        if not self.members:
            return GROUP_EMPTY
        if self.assignment_epoch != self.epoch:
            return GROUP_ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or member.state != STABLE:
                return GROUP_RECONCILING
        return GROUP_STABLE

    def owners(self, exclude: str) -> dict[tuple[str, int], str]:
        """Which other member holds each partition (assigned or still to revoke)."""
        held: dict[tuple[str, int], str] = {}
        for member in self.members.values():
            if member.member_id == exclude:
                continue
            for source in (member.assigned, member.pending_revocation):
                for topic_id, partitions in source.items():
                    for partition in partitions:
                        held[(topic_id, partition)] = member.member_id
        return held


def expired_members(
    group: ConsumerGroup, now: float, consumer_session_s: float
) -> list[tuple[str, bool]]:
    """(member id, whether its session ended) of each member to fence: its session over
    (a classic member's own session timeout, Kafka's classicProtocolSessionTimeout), its
    revocation not done in its rebalance timeout, or a classic member's JoinGroup or
    SyncGroup not come in time."""
    out = []
    for member in group.members.values():
        session_s = (
            member.classic.session_timeout_ms / 1000
            if member.classic is not None
            else consumer_session_s
        )
        late = now - member.last_heartbeat > session_s
        if (
            late
            or (
                member.state == UNREVOKED_PARTITIONS
                and member.revoke_deadline is not None
                and now > member.revoke_deadline
            )
            or (member.classic_deadline is not None and now > member.classic_deadline)
        ):
            out.append((member.member_id, late))
    return out


def _frozen(assignment: Mapping[str, frozenset[int]]) -> frozenset[tuple[str, int]]:
    return frozenset((t, p) for t, parts in assignment.items() for p in parts)


def flat(assignment: Mapping[str, frozenset[int]]) -> frozenset[tuple[str, int]]:
    return _frozen(assignment)


def nested(pairs: set[tuple[str, int]] | frozenset[tuple[str, int]]) -> Assignment:
    out: dict[str, set[int]] = {}
    for topic_id, partition in pairs:
        out.setdefault(topic_id, set()).add(partition)
    return {t: frozenset(p) for t, p in out.items()}


def reconcile(
    group: ConsumerGroup,
    member: ConsumerMember,
    owned: Mapping[str, frozenset[int]] | None,
    now: float,
) -> None:
    """Move `member` toward its target assignment, as Kafka's CurrentAssignmentBuilder:
    `owned` is what its heartbeat says it owns (None: not sent, so it may still own all)."""
    if member.state == UNREVOKED_PARTITIONS:
        if owned is None or flat(owned) & flat(member.pending_revocation):
            return  # still revoking: wait for the member (its rebalance timeout bounds it)
    elif member.state == STABLE and member.member_epoch == group.assignment_epoch:
        return
    _next_assignment(group, member, owned, now)


def _next_assignment(
    group: ConsumerGroup,
    member: ConsumerMember,
    owned: Mapping[str, frozenset[int]] | None,
    now: float,
) -> None:
    target = flat(group.target.get(member.member_id, {}))
    current = flat(member.assigned)
    kept = current & target
    to_revoke = current - target
    held = group.owners(member.member_id)
    to_add = target - current
    free = {tp for tp in to_add if tp not in held}
    unreleased = len(free) < len(to_add)
    owns_revoked = owned is None or bool(flat(owned) & to_revoke)
    if to_revoke and owns_revoked:
        # Revoke first: its epoch stays, it keeps only what the target keeps.
        member.state = UNREVOKED_PARTITIONS
        member.previous_member_epoch = member.member_epoch
        member.assigned = nested(kept)
        member.assignment_epochs = {
            tp: e for tp, e in member.assignment_epochs.items() if tp in kept
        }
        member.pending_revocation = nested(to_revoke)
        member.revoke_deadline = now + member.rebalance_timeout_ms / 1000
        return
    member.previous_member_epoch = member.member_epoch
    member.member_epoch = group.assignment_epoch
    member.assignment_epochs = {
        tp: member.assignment_epochs.get(tp, member.member_epoch)
        if tp in kept
        else member.member_epoch
        for tp in kept | free
    }
    member.assigned = nested(kept | free)
    member.pending_revocation = {}
    member.revoke_deadline = None
    member.state = UNRELEASED_PARTITIONS if unreleased else STABLE
