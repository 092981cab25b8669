"""What the coordinator holds about a group and its members, the checks of its inputs, its
GroupMetadata record, and what its join protocols (the objects it holds) use of it.

A group's members are of one kind at a time, as Kafka refuses to mix protocol types in one
group: seglog-managed members (the gRPC path: the coordinator computes the assignment) or
classic-protocol members (Kafka's JoinGroup/SyncGroup: a leader member computes it, and the
coordinator hands each member its opaque assignment bytes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from seglog.errors import InvalidGroupIdError

from .offsets_formats import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    MemberMetadata,
    encode_assignment,
    encode_subscription,
)

# Group ids are int16-length strings in __consumer_offsets keys (Kafka's format).
MAX_GROUP_ID_BYTES = 32767

# Kafka's group states. CompletingRebalance is the classic protocol's wait for the leader's
# SyncGroup; a seglog-managed group goes from PreparingRebalance straight to Stable.
EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"

# The group kinds (Group.kind): which join protocol its members speak.
MANAGED = "managed"
CLASSIC = "classic"


def check_group_id(group_id: str) -> None:
    if not group_id:
        raise InvalidGroupIdError("group_id must not be empty")
    size = len(group_id.encode())
    if size > MAX_GROUP_ID_BYTES:
        raise InvalidGroupIdError(
            f"group_id is {size} bytes in UTF-8, over the {MAX_GROUP_ID_BYTES} its stored "
            f"key format holds"
        )


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    strategies: tuple[str, ...]
    session_timeout_s: float
    rebalance_timeout_s: float
    last_heartbeat: float
    joining: bool = False
    assignment: dict[str, list[int]] = field(default_factory=dict)
    # Classic members only: (protocol name, metadata) in preference order, the instance id
    # of a static member, the assignment bytes the leader gave it, and the generation whose
    # JoinGroup answer or SyncGroup assignment it is waiting for.
    protocols: tuple[tuple[str, bytes], ...] = ()
    group_instance_id: str | None = None
    assignment_bytes: bytes = b""
    awaiting_sync: bool = False
    join_answer: ClassicJoinResult | None = None

    def copy(self) -> Member:
        return replace(self, assignment={t: list(ps) for t, ps in self.assignment.items()})

    def metadata_for(self, protocol: str) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    strategy: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline: float = 0.0
    # Whether the rebalance in progress started from no assigned members: it then waits
    # out the initial delay for more to arrive instead of completing when all have joined.
    initial_rebalance: bool = False
    # Partition counts of the subscribed topics that exist, as the assignment saw them.
    partition_counts: dict[str, int] = field(default_factory=dict)
    # Wall-clock ms of the last state change (Kafka's currentStateTimestamp).
    state_timestamp_ms: int = -1
    # MANAGED or CLASSIC while the group has members; the protocol type classic members
    # declared ("consumer", "connect", ...) and their leader.
    kind: str = MANAGED
    protocol_type: str = ""
    leader: str = ""
    # Classic members given an id by MEMBER_ID_REQUIRED that have not joined with it yet:
    # id -> monotonic deadline (their session timeout), as Kafka's pendingMembers.
    pending_members: dict[str, float] = field(default_factory=dict)
    # Classic members that have not sent SyncGroup in CompletingRebalance.
    pending_sync: set[str] = field(default_factory=set)
    # Classic JoinGroups and SyncGroups waiting for their answers (classic_waits.py).
    waiters: list[Waiter] = field(default_factory=list)

    def static_member(self, group_instance_id: str | None) -> Member | None:
        if group_instance_id is None:
            return None
        for member in self.members.values():
            if member.group_instance_id == group_instance_id:
                return member
        return None


@dataclass(eq=False)
class Waiter:
    """A classic JoinGroup or SyncGroup waiting for its answer, with no thread (Kafka's
    DelayedJoin, a sync's awaiting future): `future` is completed by whichever call or
    timer changes the group so that the wait is over (classic_waits.py)."""

    member: Member
    future: Future[Any]
    # The generation a follower's SyncGroup waits in; None for a JoinGroup.
    sync_generation: int | None = None


@dataclass(frozen=True)
class JoinResult:
    generation: int
    member_id: str
    strategy: str
    assignment: dict[str, list[int]]
    member_count: int


@dataclass(frozen=True)
class ClassicJoinResult:
    """A classic JoinGroup answer: the leader gets every member's (member id, instance id,
    metadata for the chosen protocol); the others an empty list."""

    generation: int
    member_id: str
    protocol_type: str
    protocol: str
    leader: str
    members: tuple[tuple[str, str | None, bytes], ...] = ()


def metadata_record(group: Group) -> GroupMetadata:
    """The group's GroupMetadata record, as Kafka writes it to `__consumer_offsets`."""
    if group.kind == CLASSIC:
        return GroupMetadata(
            group.protocol_type,
            group.generation,
            group.strategy or None,
            group.leader or None,
            group.state_timestamp_ms,
            tuple(
                MemberMetadata(
                    m.member_id,
                    m.client_id,
                    m.client_host,
                    int(m.rebalance_timeout_s * 1000),
                    int(m.session_timeout_s * 1000),
                    m.metadata_for(group.strategy),
                    m.assignment_bytes,
                    m.group_instance_id,
                )
                for m in group.members.values()
            ),
        )
    members = sorted(group.members.values(), key=lambda m: m.member_id)
    return GroupMetadata(
        CONSUMER_PROTOCOL_TYPE,
        group.generation,
        group.strategy or None,
        members[0].member_id if members else None,
        group.state_timestamp_ms,
        tuple(
            MemberMetadata(
                m.member_id,
                m.client_id,
                m.client_host,
                int(m.rebalance_timeout_s * 1000),
                int(m.session_timeout_s * 1000),
                encode_subscription(m.topics),
                encode_assignment(m.assignment),
            )
            for m in members
        ),
    )


def kept_at_completion(group: Group, member: Member) -> bool:
    """Does the member stay when the rebalance completes? Those that joined do; so do a
    classic group's static members that have not (Kafka's completeClassicGroupJoin removes
    only dynamic ones): a static member restarting for longer than a rebalance keeps its
    place and assignment until its session ends or it misses the SyncGroup."""
    return member.joining or (group.kind == CLASSIC and member.group_instance_id is not None)


def has_stable_members(group: Group) -> bool:
    return any(m.assignment or m.assignment_bytes or not m.joining for m in group.members.values())


class CoordinatorParts(Protocol):
    """What the join protocols (managed_protocol.py, classic_protocol.py) use of the
    coordinator (coordinator.py), which holds one of each."""

    _lock: threading.Lock
    _changed: threading.Condition
    _groups: dict[str, Group]
    _stop: threading.Event
    held_elsewhere: Callable[[str], bool]

    def _stored(self, group_id: str) -> GroupMetadata | None: ...
    def _stored_if_readable(self, group_id: str) -> GroupMetadata | None: ...
    def _group(self, group_id: str, stored: GroupMetadata | None) -> Group: ...
    def _load_stored(self, group_id: str, stored: GroupMetadata | None) -> Group | None: ...
    def _check_session_timeout(self, session_timeout_ms: int) -> None: ...
    def _check_room(self, group: Group, member_id: str) -> None: ...
    def _begin_rebalance(self, group: Group, now: float) -> None: ...
    def _maybe_complete(self, group: Group, now: float) -> None: ...
    def _complete_rebalance(self, group: Group, now: float) -> None: ...
    def _remove(self, group: Group, member_id: str, now: float) -> None: ...
    def _state_changed(self, group: Group) -> None: ...


@dataclass(frozen=True)
class OffsetToCommit:
    """One partition's offset a member commits (Kafka's OffsetCommit partition, typed)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
