"""Classic-protocol members of a KIP-848 group, served through JoinGroup, SyncGroup,
Heartbeat and LeaveGroup as Kafka 4 does during an online migration (GroupMetadataManager's
classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup,
classicGroupHeartbeatToConsumerGroup, classicGroupLeaveToConsumerGroup).

The coordinator assigns for them as for any member: a JoinGroup is a heartbeat carrying the
subscription and owned partitions inside the consumer protocol's bytes, answered at once
with the member's epoch as its generation and no leader (so the client runs no assignor);
SyncGroup hands it the partitions it holds now; Heartbeat answers REBALANCE_IN_PROGRESS
whenever the member has to join again to move on (the group epoch passed it, it has
partitions to revoke, or partitions it waits for are free), which is how a classic client
learns of a reconciliation step. A member that does not join again within its rebalance
timeout after being told to, or does not sync within it after joining, is fenced (Kafka's
join and sync timeouts).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Sequence

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from seglog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    SeglogError,
    UnknownMemberIdError,
)

from .consumer_group_state import (
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    nested,
    reconcile,
)
from .consumer_group_targets import assign_targets, bump_epoch_if_changed
from .consumer_groups import ConsumerGroups
from .group_state import ClassicJoinResult
from .offsets_formats import CONSUMER_PROTOCOL_TYPE, encode_assignment


class ClassicMembers:
    """The classic calls of members of the KIP-848 groups `groups` holds."""

    def __init__(self, groups: ConsumerGroups) -> None:
        self.groups = groups

    def serves(self, group_id: str) -> bool:
        """Is the group a consumer group with members (so classic calls are answered here)?"""
        return self.groups.has_members(group_id)

    def join(
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
    ) -> ClassicJoinResult:
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            raise InconsistentGroupProtocolError(
                f"group {group_id} is a consumer group: a classic member joins it with the "
                f"consumer protocol type, not {protocol_type!r}"
            )
        offered = tuple((name, bytes(data)) for name, data in protocols)
        topics, owned = _subscription(offered[0][1])
        if not member_id and group_instance_id is None and require_known_member_id:
            raise MemberIdRequiredError(
                "join again with this member id", f"{client_id or 'consumer'}-{uuid.uuid4()}"
            )
        now = time.monotonic()
        with self._changing(group_id) as group:
            member, joined = self._member(group, member_id, group_instance_id, client_id)
            before = (member.topics, member.classic)
            member.client_id, member.client_host = client_id, client_host
            member.instance_id = group_instance_id
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.topics = tuple(sorted(set(topics)))
            member.server_assignor = None
            member.classic = ClassicMetadata(session_timeout_ms, offered)
            member.last_heartbeat = now
            changed = joined or before[0] != member.topics
            registry = self.groups.registry
            bump_epoch_if_changed(registry, group, changed)
            assign_targets(registry, group)
            ids = {n: t.topic_id for n in owned if (t := registry.topics.get(n)) is not None}
            reconcile(group, member, nested(_owned_pairs(owned, ids)), now)
            # It must sync within its rebalance timeout (Kafka's sync timeout).
            member.classic_deadline = now + rebalance_timeout_ms / 1000
            return ClassicJoinResult(
                member.member_epoch, member.member_id, CONSUMER_PROTOCOL_TYPE, offered[0][0], ""
            )

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol: str | None,
    ) -> tuple[str, str, bytes]:
        with self._changing(group_id) as group:
            member = _classic_member(group, member_id, group_instance_id)
            _check_generation(member, generation)
            names = [name for name, _ in member.classic.protocols]  # type: ignore[union-attr]
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol is not None and protocol not in names
            ):
                raise InconsistentGroupProtocolError(
                    f"protocol {protocol_type}/{protocol} is not member {member_id}'s"
                )
            if group.epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS:
                self._must_join(member)
            member.classic_deadline = None
            member.last_heartbeat = time.monotonic()
            return CONSUMER_PROTOCOL_TYPE, protocol or names[0], self._assignment(member)

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, group_instance_id: str | None
    ) -> None:
        with self._changing(group_id) as group:
            member = _classic_member(group, member_id, group_instance_id)
            _check_generation(member, generation)
            member.last_heartbeat = time.monotonic()
            if (
                member.member_epoch < group.epoch
                or member.state == UNREVOKED_PARTITIONS
                or (member.state == UNRELEASED_PARTITIONS and not _waits(group, member))
            ):
                self._must_join(member)

    def leave(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> list[SeglogError | None]:
        """Each member's outcome, in order (None: it left)."""
        out: list[SeglogError | None] = []
        with self._changing(group_id) as group:
            for member_id, instance_id in members:
                try:
                    member = _classic_member(group, member_id, instance_id, by_instance=True)
                except SeglogError as exc:
                    out.append(exc)
                    continue
                self.groups.remove_member(group, member.member_id)
                out.append(None)
        return out

    @contextlib.contextmanager
    def _changing(self, group_id: str) -> Iterator[ConsumerGroup]:
        """The group as ConsumerGroups.changing gives it; gone since the call was routed
        here (downgraded, or emptied and deleted), the client is told to retry, and its
        next call goes to the classic coordinator."""
        try:
            with self.groups.changing(group_id) as group:
                yield group
        except GroupIdNotFoundError:
            raise CoordinatorNotAvailableError(
                f"group {group_id} changed protocol meanwhile: call again"
            ) from None

    def _member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None, client_id: str
    ) -> tuple[ConsumerMember, bool]:
        """The joining member, made if new (True), a static one taking its instance's place."""
        holder = group.static_members.get(instance_id) if instance_id else None
        if holder is not None and holder in group.members:
            if member_id and member_id != holder:
                raise FencedInstanceIdError(f"instance {instance_id} is member {holder}")
            return group.members[holder], False
        known = group.members.get(member_id) if member_id else None
        if known is not None:
            if known.classic is None:
                raise InconsistentGroupProtocolError(
                    f"member {member_id} uses the consumer protocol, not the classic one"
                )
            return known, False
        if len(group.members) >= self.groups.config.group_max_size:
            raise GroupMaxSizeReachedError(f"group {group.group_id} is full")
        member = ConsumerMember(member_id or f"{client_id or 'consumer'}-{uuid.uuid4()}")
        group.members[member.member_id] = member
        if instance_id:
            group.static_members[instance_id] = member.member_id
        return member, True

    def _must_join(self, member: ConsumerMember) -> None:
        """REBALANCE_IN_PROGRESS: it joins again within its rebalance timeout or is fenced."""
        if member.classic_deadline is None:
            member.classic_deadline = time.monotonic() + member.rebalance_timeout_ms / 1000
        raise RebalanceInProgressError("the group is rebalancing: join again")

    def _assignment(self, member: ConsumerMember) -> bytes:
        """What it holds, as the consumer protocol's assignment bytes (by topic name)."""
        named: dict[str, list[int]] = {}
        for topic_id, partitions in member.assigned.items():
            try:
                name = self.groups.registry.topic_name_of(topic_id)
            except SeglogError:
                continue  # deleted since
            named[name] = sorted(partitions)
        return encode_assignment(named)


def _subscription(metadata: bytes) -> tuple[list[str], dict[str, list[int]]]:
    """The topics and owned partitions (by topic name) in a consumer protocol subscription."""
    try:
        decoded = ConsumerProtocolSubscription.decode(metadata)
    except Exception as exc:  # the client's bytes: refused, as Kafka's SchemaException
        raise InconsistentGroupProtocolError(f"the subscription does not decode: {exc}") from exc
    owned: dict[str, list[int]] = {}
    for entry in getattr(decoded, "owned_partitions", None) or []:
        owned.setdefault(entry.topic, []).extend(entry.partitions)
    return list(decoded.topics or []), owned


def _owned_pairs(owned: dict[str, list[int]], ids: dict[str, str]) -> set[tuple[str, int]]:
    return {(ids[n], p) for n, ps in owned.items() if n in ids for p in ps}


def _classic_member(
    group: ConsumerGroup, member_id: str, instance_id: str | None, by_instance: bool = False
) -> ConsumerMember:
    """Kafka's validateConsumerGroupMember, then throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id} is not in group {group.group_id}")
    else:
        holder = group.static_members.get(instance_id)
        member = group.members.get(holder) if holder else None
        if member is None:
            raise UnknownMemberIdError(f"instance {instance_id} is not in group {group.group_id}")
        if member.member_id != member_id and not (by_instance and not member_id):
            raise FencedInstanceIdError(f"instance {instance_id} is member {member.member_id}")
    if member.classic is None:
        raise UnknownMemberIdError(f"member {member.member_id} does not use the classic protocol")
    return member


def _check_generation(member: ConsumerMember, generation: int) -> None:
    if generation != member.member_epoch:
        raise IllegalGenerationError(
            f"generation {generation} is not member {member.member_id}'s epoch "
            f"{member.member_epoch}"
        )


def _waits(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Does a partition of its target it does not hold yet still belong to another member?"""
    held = group.owners(member.member_id)
    target = group.target.get(member.member_id, {})
    return any(
        (topic_id, p) in held
        for topic_id, partitions in target.items()
        for p in partitions
        if p not in member.assigned.get(topic_id, frozenset())
    )
