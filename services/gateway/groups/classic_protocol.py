"""Kafka's classic group protocol on the coordinator (ClassicGroup and GroupMetadataManager
in Kafka's group-coordinator), for Kafka clients: the assignment is computed by a leader
member, not by the coordinator.

JoinGroup carries a protocol type ("consumer") and (protocol name, opaque metadata) pairs.
When the rebalance completes, the coordinator chooses the protocol every member supports
that most members prefer, keeps or picks a leader, answers the leader with every member's
metadata and the others with nothing, and the group waits in CompletingRebalance for the
leader's SyncGroup, which carries each member's assignment bytes; the followers' SyncGroup
waits for it and returns their bytes. A new member of JoinGroup v4+ is first answered
MEMBER_ID_REQUIRED with an id to join with (it is "pending" until it does). A static member
(group.instance.id) that joins again without its member id takes over its old id's place; in
a Stable group whose chosen protocol it does not change, without a rebalance. Waiting in
JoinGroup or SyncGroup keeps a member's session alive; members that have not sent SyncGroup
within the rebalance timeout of CompletingRebalance are removed (Kafka's pending sync).

A join or a follower's sync that must wait returns a Future and holds no thread
(classic_waits.py); `join_classic` and `sync_group` wait for it on the caller's thread.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from seglog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    SeglogError,
    UnknownMemberIdError,
)

from .classic_waits import settling, wait_in
from .consumer_protocol import subscription_topics
from .group_state import (
    CLASSIC,
    COMPLETING_REBALANCE,
    PREPARING_REBALANCE,
    STABLE,
    ClassicJoinResult,
    CoordinatorParts,
    Group,
    Member,
    Waiter,
    check_group_id,
)
from .offsets_formats import CONSUMER_PROTOCOL_TYPE, GroupMetadata

T = TypeVar("T")


class ClassicProtocol:
    """The classic protocol's calls: the coordinator holds one (`GroupCoordinator.classic`),
    which works on the coordinator's groups under its lock."""

    def __init__(self, coordinator: CoordinatorParts) -> None:
        self._coordinator = coordinator

    def join_classic(self, *args: Any, **kwargs: Any) -> ClassicJoinResult:
        """`start_join_classic`, waited for on the calling thread (the gRPC adapter's)."""
        return self.start_join_classic(*args, **kwargs).result()

    def start_join_classic(
        self,
        group_id: str,
        member_id: str,
        *,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
    ) -> Future[ClassicJoinResult]:
        """Join (or join again): the rebalance's answer, completed when the rebalance
        completes (classic_waits.py); SeglogError at once for a join refused outright."""
        coordinator = self._coordinator
        check_group_id(group_id)
        coordinator._check_session_timeout(session_timeout_ms)
        if rebalance_timeout_ms < 0:
            raise InvalidRequestError(f"rebalance_timeout_ms {rebalance_timeout_ms} is negative")
        if group_instance_id == "":
            raise InvalidRequestError("group_instance_id must not be empty (null: dynamic)")
        if not protocol_type or not protocols:
            raise InconsistentGroupProtocolError("a join needs a protocol type and protocols")
        offered = tuple((name, bytes(data)) for name, data in protocols)
        stored = coordinator._stored(group_id)
        now = time.monotonic()
        with settling(coordinator) as touched:
            if group_id not in coordinator._groups and coordinator.held_elsewhere(group_id):
                # Upgraded to a consumer group since this call was routed (classic_handover):
                # a new classic group beside it would hand out its partitions twice.
                raise CoordinatorNotAvailableError(f"group {group_id} changed protocol: retry")
            group = coordinator._group(group_id, stored)
            touched.append(group)  # a static member's old id may have waits to end
            _check_compatible(group, protocol_type, offered)
            if not group.members:
                group.kind, group.protocol_type = CLASSIC, protocol_type
            new_id = f"{group_instance_id or client_id or 'consumer'}-{uuid.uuid4()}"
            leader_before = group.leader
            static = group.static_member(group_instance_id)
            if member_id and static is not None and static.member_id != member_id:
                raise FencedInstanceIdError(
                    f"instance {group_instance_id} of group {group_id} is now member "
                    f"{static.member_id}, not {member_id}"
                )
            if not (static is not None or member_id in group.members):
                coordinator._check_room(group, member_id)
            if not member_id and static is not None:
                member = _replace_static_member(group, static, new_id)
            elif not member_id and group_instance_id is None and require_known_member_id:
                group.pending_members[new_id] = now + session_timeout_ms / 1000
                raise MemberIdRequiredError(f"join again with member id {new_id}", new_id)
            elif not member_id or member_id in group.pending_members:
                group.pending_members.pop(member_id, None)
                member = group.members[member_id or new_id] = Member(
                    member_id or new_id, client_id, client_host, (), (), 0, 0, now
                )
                member.group_instance_id = group_instance_id
            else:
                known = group.members.get(member_id)
                if known is None:
                    raise UnknownMemberIdError(f"member {member_id} is not in group {group_id}")
                member = known
            unchanged = member.protocols == offered
            member.client_id, member.client_host = client_id, client_host
            member.protocols = offered
            if protocol_type == CONSUMER_PROTOCOL_TYPE:
                member.topics = subscription_topics(offered[0][1])
            member.strategies = tuple(name for name, _ in offered)
            member.session_timeout_s = session_timeout_ms / 1000
            member.rebalance_timeout_s = rebalance_timeout_ms / 1000
            member.last_heartbeat = now
            if not member_id and static is not None and group.state == STABLE:
                if select_protocol(group) == group.strategy:
                    # Kafka answers with the leader as it was, so a restarted leader does not
                    # compute an assignment a Stable group would not hand out.
                    coordinator._state_changed(group)
                    return _answered(
                        _answer(group, member, leader=leader_before, with_members=False)
                    )
            elif member_id and unchanged and group.state == COMPLETING_REBALANCE:
                # It lost its answer: the same one again.
                return _answered(_answer(group, member))
            elif member_id and unchanged and group.state == STABLE and group.leader != member_id:
                return _answered(_answer(group, member))
            member.joining = True
            member.join_answer = None
            if group.state != PREPARING_REBALANCE:
                coordinator._begin_rebalance(group, now)
            future: Future[ClassicJoinResult] = Future()
            wait_in(coordinator, group, Waiter(member, future))
            coordinator._maybe_complete(group, now)  # the session reaper ends it at the deadline
            return future

    def sync_group(self, *args: Any, **kwargs: Any) -> tuple[str, str, bytes]:
        """`start_sync_group`, waited for on the calling thread (the gRPC adapter's)."""
        return self.start_sync_group(*args, **kwargs).result()

    def start_sync_group(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        *,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol: str | None,
        assignments: dict[str, bytes],
    ) -> Future[tuple[str, str, bytes]]:
        """The group's protocol type and protocol, and the member's assignment for the
        generation; the leader's call sets everyone's, a follower's completes once the
        leader's has (classic_waits.py). SeglogError at once for a sync refused outright."""
        coordinator = self._coordinator
        stored = coordinator._stored_if_readable(group_id)
        with settling(coordinator) as touched:
            group = coordinator._load_stored(group_id, stored)
            if group is not None:
                touched.append(group)
            if group is None or not group.members:
                raise UnknownMemberIdError(f"member {member_id} is not in group {group_id}")
            member = named_member(group, member_id, group_instance_id)
            if group.kind != CLASSIC:
                raise InconsistentGroupProtocolError(
                    f"group {group_id} has seglog-managed members, which do not sync"
                )
            if generation != group.generation:
                raise IllegalGenerationError(
                    f"generation {generation} of group {group_id} is stale; "
                    f"the current one is {group.generation}"
                )
            if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol is not None and protocol != group.strategy
            ):
                raise InconsistentGroupProtocolError(
                    f"group {group_id} uses {group.protocol_type}/{group.strategy}"
                )
            member.last_heartbeat = time.monotonic()
            if group.state == PREPARING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id} is rebalancing: join again")
            if group.state == STABLE:
                return _answered((group.protocol_type, group.strategy, member.assignment_bytes))
            group.pending_sync.discard(member_id)
            if member_id == group.leader:
                for each in group.members.values():
                    each.assignment_bytes = assignments.get(each.member_id, b"")
                    each.awaiting_sync = False
                group.pending_sync.clear()
                group.state = STABLE
                coordinator._state_changed(group)
                coordinator._changed.notify_all()
                return _answered((group.protocol_type, group.strategy, member.assignment_bytes))
            member.awaiting_sync = True
            synced: Future[tuple[str, str, bytes]] = Future()
            wait_in(coordinator, group, Waiter(member, synced, sync_generation=generation))
            return synced

    def leave_members(
        self, group_id: str, leaving: Sequence[tuple[str, str | None]]
    ) -> list[SeglogError | None]:
        """LeaveGroup v3+: each (member id, group instance id) leaves, or its error."""
        coordinator = self._coordinator
        outcomes: list[SeglogError | None] = []
        with settling(coordinator) as touched:
            group = coordinator._groups.get(group_id)
            touched.extend([group] if group is not None else [])
            now = time.monotonic()
            for member_id, group_instance_id in leaving:
                try:
                    if group is None:
                        raise UnknownMemberIdError(f"group {group_id} has no members")
                    if member_id and member_id in group.pending_members:
                        del group.pending_members[member_id]
                        coordinator._maybe_complete(group, now)
                        coordinator._changed.notify_all()
                    else:
                        if group_instance_id is not None and not member_id:
                            static = group.static_member(group_instance_id)
                            member_id = static.member_id if static is not None else ""
                        named_member(group, member_id, group_instance_id)
                        coordinator._remove(group, member_id, now)
                    outcomes.append(None)
                except SeglogError as exc:
                    outcomes.append(exc)
        return outcomes


def named_member(group: Group, member_id: str, group_instance_id: str | None) -> Member:
    """The member a call names, refusing an unknown one and a static member's old id."""
    static = group.static_member(group_instance_id)
    if group_instance_id is not None and static is not None and static.member_id != member_id:
        raise FencedInstanceIdError(
            f"instance {group_instance_id} of group {group.group_id} is now member "
            f"{static.member_id}, not {member_id}"
        )
    member = group.members.get(member_id)
    if member is None or (group_instance_id is not None and static is None):
        raise UnknownMemberIdError(f"member {member_id} is not in group {group.group_id}")
    return member


def restore_static_members(group: Group, stored: GroupMetadata, now: float) -> None:
    """A classic group loaded from its record keeps its static members, as Kafka's
    coordinator keeps them when it loads a group: one restarted, or met by a new coordinator,
    joins under its instance id and takes its place back (its assignment, without a
    rebalance while the group's protocol holds). Dynamic members must join again: if the
    group had any, the restored ones are asked to join as well (a rebalance), since the
    assignment no longer covers the group. A restored member that never returns expires with
    its session."""
    static = [m for m in stored.members if m.group_instance_id is not None]
    if not static or not stored.protocol:
        return
    group.kind, group.protocol_type = CLASSIC, stored.protocol_type
    for record in static:
        member = group.members[record.member_id] = Member(
            record.member_id,
            record.client_id,
            record.client_host,
            (),
            (stored.protocol,),
            record.session_timeout_ms / 1000,
            max(record.rebalance_timeout_ms, 0) / 1000,
            now,
            protocols=((stored.protocol, record.subscription),),
            group_instance_id=record.group_instance_id,
            assignment_bytes=record.assignment,
        )
        if stored.protocol_type == CONSUMER_PROTOCOL_TYPE:
            member.topics = subscription_topics(record.subscription)
    group.leader = stored.leader if stored.leader in group.members else static[0].member_id
    group.state = STABLE
    if len(static) < len(stored.members):
        group.state = PREPARING_REBALANCE
        group.rebalance_deadline = now + max(m.rebalance_timeout_s for m in group.members.values())


def complete_classic_join(group: Group, now: float) -> None:
    """The rebalance's end for classic members (the caller removed those that did not
    join and handled an emptied group): a new generation waits for the leader's sync."""
    group.generation += 1
    group.strategy = select_protocol(group)
    leader = group.members.get(group.leader)
    if leader is None or not leader.joining:
        # Kafka's maybeElectNewJoinedLeader: a static leader that did not join again hands
        # leadership to a member that did (the caller keeps at least one).
        group.leader = next(m.member_id for m in group.members.values() if m.joining)
    group.state = COMPLETING_REBALANCE
    group.pending_sync = set(group.members)
    group.rebalance_deadline = now + max(m.rebalance_timeout_s for m in group.members.values())
    for member in group.members.values():
        member.joining = False
        member.awaiting_sync = False
        member.assignment_bytes = b""
        member.last_heartbeat = now
    for member in group.members.values():
        member.join_answer = _answer(group, member)


def _answer(
    group: Group, member: Member, *, leader: str | None = None, with_members: bool = True
) -> ClassicJoinResult:
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    if with_members and member.member_id == group.leader:
        members = tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(group.strategy))
            for m in group.members.values()
        )
    return ClassicJoinResult(
        group.generation,
        member.member_id,
        group.protocol_type,
        group.strategy,
        group.leader if leader is None else leader,
        members,
    )


def _check_compatible(
    group: Group, protocol_type: str, offered: tuple[tuple[str, bytes], ...]
) -> None:
    """Kafka refuses a member whose protocol type differs from the group's members' (and a
    seglog-managed group's), or that shares no protocol with every one of them."""
    if not group.members:
        return
    if group.kind != CLASSIC or group.protocol_type != protocol_type:
        raise InconsistentGroupProtocolError(
            f"group {group.group_id} has members of protocol type "
            f"{group.protocol_type if group.kind == CLASSIC else 'seglog-managed'}, "
            f"not {protocol_type}"
        )
    names = {name for name, _ in offered}
    if not names & _common_protocols(group.members.values()):
        raise InconsistentGroupProtocolError(
            f"protocols {sorted(names)} share none with group {group.group_id}'s members"
        )


def _common_protocols(members: Iterable[Member]) -> set[str]:
    common: set[str] | None = None
    for member in members:
        names = set(member.strategies)
        common = names if common is None else common & names
    return common or set()


def select_protocol(group: Group) -> str:
    """Kafka's selectProtocol: among the protocols every member supports, the one most
    members list first (ties: the earliest in the first member's preferences)."""
    members = list(group.members.values())
    candidates = _common_protocols(members)
    if not candidates:
        return ""
    votes = Counter(next(n for n in m.strategies if n in candidates) for m in members)
    order = [n for n in members[0].strategies if n in candidates]
    return max(order, key=lambda name: (votes[name], -order.index(name)))


def _replace_static_member(group: Group, old: Member, new_id: str) -> Member:
    """A static member back under a new member id takes its old id's place (assignment,
    leadership); the old id's waiting calls end with FENCED_INSTANCE_ID."""
    del group.members[old.member_id]
    member = Member(
        new_id,
        old.client_id,
        old.client_host,
        old.topics,
        old.strategies,
        old.session_timeout_s,
        old.rebalance_timeout_s,
        old.last_heartbeat,
        joining=old.joining,
        protocols=old.protocols,
        group_instance_id=old.group_instance_id,
        assignment_bytes=old.assignment_bytes,
    )
    group.members[new_id] = member
    if old.member_id in group.pending_sync:
        group.pending_sync.discard(old.member_id)
        group.pending_sync.add(new_id)
    if group.leader == old.member_id:
        group.leader = new_id
    return member


def _answered(answer: T) -> Future[T]:
    """A call answered at once, as a completed future."""
    done: Future[T] = Future()
    done.set_result(answer)
    return done
