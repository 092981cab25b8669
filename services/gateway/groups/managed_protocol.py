"""seglog's own consumers (the gRPC GroupCoordinator service) on the coordinator: the
coordinator computes their assignment itself when a rebalance completes (range or
roundrobin, the first strategy in the first member's list that every member supports), as
Kafka's KIP-848 server-side assignors do, and each JoinGroup returns the member's partitions.
"""

from __future__ import annotations

import time
import uuid

from seglog.errors import (
    InconsistentGroupProtocolError,
    InvalidRequestError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

from .assignors import ASSIGNORS
from .group_state import (
    MANAGED,
    PREPARING_REBALANCE,
    STABLE,
    CoordinatorParts,
    Group,
    JoinResult,
    Member,
    check_group_id,
)
from .offsets_formats import CONSUMER_PROTOCOL_TYPE


class ManagedProtocol:
    """The seglog-managed join: the coordinator holds one (`GroupCoordinator.managed`),
    which works on the coordinator's groups under its lock."""

    def __init__(self, coordinator: CoordinatorParts) -> None:
        self._coordinator = coordinator

    def join(
        self,
        group_id: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        topics: tuple[str, ...],
        strategies: tuple[str, ...],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        wait: bool = True,
    ) -> JoinResult:
        """Join (or join again) and wait until the rebalance completes. A known member of a
        stable group that joins again with the same subscription is answered its current
        generation at once, starting no rebalance (Kafka's rule for a follower's rejoin): a
        client looping JoinGroup cannot keep its group rebalancing. Without `wait` the join
        is recorded but not waited for: unless it completes the rebalance, JoinAgainLater
        gives the member its id to call again with (the caller has no thread to spare)."""
        coordinator = self._coordinator
        check_group_id(group_id)
        if rebalance_timeout_ms < 0:
            raise InvalidRequestError(f"rebalance_timeout_ms {rebalance_timeout_ms} is negative")
        coordinator._check_session_timeout(session_timeout_ms)
        strategies = tuple(s for s in strategies if s in ASSIGNORS)
        if not strategies:
            raise InconsistentGroupProtocolError(
                f"no supported assignment strategy offered; the coordinator has {sorted(ASSIGNORS)}"
            )
        stored = coordinator._stored(group_id)
        now = time.monotonic()
        with coordinator._lock:
            group = coordinator._group(group_id, stored)
            if group.members and group.kind != MANAGED:
                raise InconsistentGroupProtocolError(
                    f"group {group_id} has Kafka classic-protocol members: a seglog-managed "
                    f"consumer cannot join it"
                )
            group.kind, group.protocol_type = MANAGED, CONSUMER_PROTOCOL_TYPE
            if member_id:
                member = group.members.get(member_id)
                if member is None:
                    raise UnknownMemberIdError(
                        f"member {member_id} is not in group {group_id}: join without an id"
                    )
            else:
                coordinator._check_room(group, "")
                member_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
                member = None
            others = [m.strategies for m in group.members.values() if m.member_id != member_id]
            if not common_strategy([*others, strategies]):
                raise InconsistentGroupProtocolError(
                    f"strategies {list(strategies)} share none with group {group_id}'s members"
                )
            if (
                member is not None
                and group.state == STABLE
                and member.topics == topics
                and member.strategies == strategies
            ):
                member.session_timeout_s = session_timeout_ms / 1000
                member.rebalance_timeout_s = max(rebalance_timeout_ms, 0) / 1000
                member.last_heartbeat = now
                return _result(group, member)
            if member is None:
                member = group.members[member_id] = Member(
                    member_id, client_id, client_host, topics, strategies, 0, 0, now
                )
            member.topics = topics
            member.strategies = strategies
            member.session_timeout_s = session_timeout_ms / 1000
            member.rebalance_timeout_s = max(rebalance_timeout_ms, 0) / 1000
            member.last_heartbeat = now
            member.joining = True
            if group.state != PREPARING_REBALANCE:
                coordinator._begin_rebalance(group, now)
            coordinator._maybe_complete(group, now)
            if not wait and member.joining:
                raise JoinAgainLater(
                    f"group {group_id} is rebalancing and this coordinator has no room to hold "
                    f"the join: call again with member id {member_id}",
                    member_id,
                )
            while member.joining and not coordinator._stop.is_set():
                if group.members.get(member_id) is not member:
                    raise UnknownMemberIdError(f"member {member_id} was removed from {group_id}")
                now = time.monotonic()
                if now >= group.rebalance_deadline:
                    coordinator._complete_rebalance(group, now)
                    break
                coordinator._changed.wait(group.rebalance_deadline - now)
                coordinator._maybe_complete(group, time.monotonic())
            if member.joining:
                raise RebalanceInProgressError("the coordinator is shutting down")
            return _result(group, member)


class JoinAgainLater(RebalanceInProgressError):
    """A join recorded but not waited for: the member calls again, with this id, after its
    back-off; a rebalance that completed meanwhile answers it at once."""

    def __init__(self, message: str, member_id: str) -> None:
        super().__init__(message)
        self.member_id = member_id


def _result(group: Group, member: Member) -> JoinResult:
    return JoinResult(
        group.generation,
        member.member_id,
        group.strategy,
        {t: list(ps) for t, ps in member.assignment.items()},
        len(group.members),
    )


def complete_managed_join(group: Group, now: float, partition_counts: dict[str, int]) -> None:
    """The rebalance's end for seglog-managed members (the caller removed those that did not
    join and handled an emptied group): a new generation, assigned here."""
    group.generation += 1
    group.strategy = common_strategy([m.strategies for m in group.members.values()])
    subscriptions = {m.member_id: m.topics for m in group.members.values()}
    group.partition_counts = partition_counts
    assignment = ASSIGNORS[group.strategy](subscriptions, partition_counts)
    for member in group.members.values():
        member.assignment = assignment.get(member.member_id, {})
        member.joining = False
        member.last_heartbeat = now
    group.state = STABLE


def common_strategy(preferences: list[tuple[str, ...]]) -> str:
    """The first strategy of the first member's list that every member supports."""
    if not preferences:
        return ""
    for strategy in preferences[0]:
        if all(strategy in p for p in preferences[1:]):
            return strategy
    return ""
