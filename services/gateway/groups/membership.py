"""Group membership as the broker core does it, typed, for any caller: joining (Kafka's
classic protocol, whose leader member assigns, or seglog's managed one, whose coordinator
assigns), syncing, heartbeats and leaving. Kafka's group APIs (kafka/group_apis.py) and the
GroupCoordinator gRPC service (group_service.py) are adapters over `GroupMembership`.

Each call goes through the groups core's order (groups_core.py `on_coordinator`): whether the
caller may (Read on the group), whether the group id is valid and this gateway coordinates
the group, then the coordinator's work. A managed join also needs Describe on each topic it
subscribes to: the coordinator assigns partitions itself, so a topic the member may not see
must not reach its assignment. A classic join carries its topics inside opaque subscription
bytes and its leader member assigns from Metadata, which shows it only the topics it may
Describe — as on a Kafka broker, nothing more to check there.

Errors are raised (SeglogError): the caller's refusal, NotCoordinatorError naming the
coordinating gateway, and the coordinator's answers (REBALANCE_IN_PROGRESS and the like),
which each adapter answers as its protocol does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import TypeVar

from seglog.errors import (
    InconsistentGroupProtocolError,
    NonEmptyGroupError,
    SeglogError,
    UnsupportedVersionError,
)

from ..broker.caller import Caller
from .classic_members import ClassicMembers
from .consumer_groups import ConsumerHeartbeat, HeartbeatAnswer
from .group_state import ClassicJoinResult, JoinResult
from .groups_core import GroupsCore

T = TypeVar("T")


@dataclass(frozen=True)
class ClassicJoin:
    """Kafka's JoinGroup: the member's protocols as (name, metadata) pairs."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    require_known_member_id: bool  # JoinGroup v4+: a new member first gets its id


@dataclass(frozen=True)
class ManagedJoin:
    """A seglog consumer's join: its topics and assignment strategies; `wait`: whether the
    adapter has a thread to hold the join until the rebalance completes (else the join is
    recorded and JoinAgainLater gives the member its id to call again with)."""

    group_id: str
    member_id: str
    client_id: str
    client_host: str
    topics: Sequence[str]
    strategies: Sequence[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    wait: bool = True


@dataclass(frozen=True)
class GroupSync:
    """Kafka's SyncGroup: the leader's assignments, by member id (others send none)."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol: str | None = None
    assignments: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncAnswer:
    protocol_type: str
    protocol: str
    assignment: bytes


@dataclass(frozen=True)
class GroupHeartbeat:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupLeave:
    """Members leaving one group: (member id, group instance id) each."""

    group_id: str
    members: Sequence[tuple[str, str | None]]


class GroupMembership:
    def __init__(self, groups: GroupsCore) -> None:
        self.groups = groups
        self.coordinator = groups.coordinator
        self.authorization = groups.authorization

    def _classic_in_consumer_group(self, group_id: str) -> ClassicMembers | None:
        """Who answers a classic call to a KIP-848 group with members (its classic members'
        calls during an online migration, classic_members.py); None: the classic
        coordinator does."""
        consumer_groups = self.groups.consumer_groups
        if consumer_groups is None or not consumer_groups.has_members(group_id):
            return None
        return ClassicMembers(consumer_groups)

    def _not_a_consumer_group(self, group_id: str) -> None:
        """A managed join to a KIP-848 group: refused while it has members (seglog's
        managed members do not migrate); an empty one is deleted first, as Kafka replaces
        an empty group of the other kind."""
        consumer_groups = self.groups.consumer_groups
        if consumer_groups is None or not consumer_groups.is_consumer_group(group_id):
            return
        try:
            consumer_groups.delete_group(group_id)
        except NonEmptyGroupError:
            raise InconsistentGroupProtocolError(
                f"group {group_id} is a consumer group (group.protocol=consumer) with members"
            ) from None

    def join_classic(self, caller: Caller, join: ClassicJoin) -> ClassicJoinResult:
        """The join, waited for on the caller's thread (the gRPC adapter's)."""
        return self.start_join_classic(caller, join).result()

    def start_join_classic(self, caller: Caller, join: ClassicJoin) -> Future[ClassicJoinResult]:
        """The join as a future the coordinator completes when the rebalance does (or
        refuses): for an adapter that answers later instead of holding a thread
        (kafka/later.py). Refusals before the wait (the caller's, NOT_COORDINATOR) raise."""

        def work() -> Future[ClassicJoinResult]:
            served = self._classic_in_consumer_group(join.group_id)
            if served is not None:
                return _done(
                    served.join(
                        join.group_id,
                        join.member_id,
                        group_instance_id=join.group_instance_id,
                        client_id=join.client_id,
                        client_host=join.client_host,
                        protocol_type=join.protocol_type,
                        protocols=list(join.protocols),
                        session_timeout_ms=join.session_timeout_ms,
                        rebalance_timeout_ms=join.rebalance_timeout_ms,
                        require_known_member_id=join.require_known_member_id,
                    )
                )
            self._not_a_consumer_group(join.group_id)
            return self.coordinator.classic.start_join_classic(
                join.group_id,
                join.member_id,
                group_instance_id=join.group_instance_id,
                client_id=join.client_id,
                client_host=join.client_host,
                protocol_type=join.protocol_type,
                protocols=list(join.protocols),
                session_timeout_ms=join.session_timeout_ms,
                rebalance_timeout_ms=join.rebalance_timeout_ms,
                require_known_member_id=join.require_known_member_id,
            )

        return self.groups.on_coordinator(caller, "JoinGroup", join.group_id, work)

    def join_managed(self, caller: Caller, join: ManagedJoin) -> JoinResult:
        topics = sorted(set(join.topics))
        self.authorization.check(caller, [("Describe", "topic", t) for t in topics], "JoinGroup")

        def work() -> JoinResult:
            self._not_a_consumer_group(join.group_id)
            return self.coordinator.managed.join(
                join.group_id,
                join.member_id,
                client_id=join.client_id,
                client_host=join.client_host,
                topics=tuple(join.topics),
                strategies=tuple(join.strategies),
                session_timeout_ms=join.session_timeout_ms,
                rebalance_timeout_ms=join.rebalance_timeout_ms,
                wait=join.wait,
            )

        return self.groups.on_coordinator(caller, "JoinGroup", join.group_id, work)

    def consumer_heartbeat(self, caller: Caller, hb: ConsumerHeartbeat) -> HeartbeatAnswer:
        """A KIP-848 heartbeat (the gRPC adapter's; Kafka's adapter checks the same): Read on
        the group, then Describe on each topic it names, as Kafka's KafkaApis."""
        consumer_groups = self.groups.consumer_groups
        if consumer_groups is None:
            raise UnsupportedVersionError("this gateway serves no consumer groups")

        def work() -> HeartbeatAnswer:
            topics = sorted(set(hb.topics or ()))
            self.authorization.check(
                caller, [("Describe", "topic", t) for t in topics], "ConsumerGroupHeartbeat"
            )
            return consumer_groups.heartbeat(hb)

        return self.groups.on_coordinator(caller, "ConsumerGroupHeartbeat", hb.group_id, work)

    def sync(self, caller: Caller, sync: GroupSync) -> SyncAnswer:
        """The sync, waited for on the caller's thread (the gRPC adapter's)."""
        return self.start_sync(caller, sync).result()

    def start_sync(self, caller: Caller, sync: GroupSync) -> Future[SyncAnswer]:
        """The sync as a future completed when the leader's assignment comes (a follower's)
        or at once (the leader's); see start_join_classic."""

        def work() -> Future[SyncAnswer]:
            served = self._classic_in_consumer_group(sync.group_id)
            if served is not None:
                return _done(
                    SyncAnswer(
                        *served.sync(
                            sync.group_id,
                            sync.member_id,
                            sync.generation_id,
                            sync.group_instance_id,
                            sync.protocol_type,
                            sync.protocol,
                        )
                    )
                )
            synced = self.coordinator.classic.start_sync_group(
                sync.group_id,
                sync.member_id,
                sync.generation_id,
                group_instance_id=sync.group_instance_id,
                protocol_type=sync.protocol_type,
                protocol=sync.protocol,
                assignments=dict(sync.assignments),
            )
            answer: Future[SyncAnswer] = Future()

            def settle(done: Future[tuple[str, str, bytes]]) -> None:
                try:
                    if done.cancelled():
                        answer.cancel()
                    elif (error := done.exception()) is not None:
                        answer.set_exception(error)
                    else:
                        answer.set_result(SyncAnswer(*done.result()))
                except InvalidStateError:
                    pass  # given up by the adapter meanwhile: nothing to hand on

            def abandon(given_up: Future[SyncAnswer]) -> None:
                # The adapter cancels when its connection closes: the coordinator must see
                # the member's wait end, as when it waits on the coordinator's own future.
                if given_up.cancelled():
                    synced.cancel()

            answer.add_done_callback(abandon)
            synced.add_done_callback(settle)
            return answer

        return self.groups.on_coordinator(caller, "SyncGroup", sync.group_id, work)

    def heartbeat(self, caller: Caller, beat: GroupHeartbeat) -> None:
        def work() -> None:
            served = self._classic_in_consumer_group(beat.group_id)
            answerer = served if served is not None else self.coordinator
            answerer.heartbeat(
                beat.group_id, beat.member_id, beat.generation_id, beat.group_instance_id
            )

        self.groups.on_coordinator(caller, "Heartbeat", beat.group_id, work)

    def leave(self, caller: Caller, leave: GroupLeave) -> list[SeglogError | None]:
        """Each member's outcome, in order (None: it left)."""

        def work() -> list[SeglogError | None]:
            served = self._classic_in_consumer_group(leave.group_id)
            if served is not None:
                return served.leave(leave.group_id, list(leave.members))
            return self.coordinator.classic.leave_members(leave.group_id, list(leave.members))

        return self.groups.on_coordinator(caller, "LeaveGroup", leave.group_id, work)


def _done(answer: T) -> Future[T]:
    """An answer already known, as the future the adapters wait on."""
    future: Future[T] = Future()
    future.set_result(answer)
    return future
