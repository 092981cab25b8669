"""Online migration between Kafka's two consumer group protocols, as Kafka 4 does it
(GroupMetadataManager's convertToConsumerGroup / convertToClassicGroup, ConsumerGroup.
fromClassicGroup, ClassicGroup.fromConsumerGroup), so a group rolls its consumers from
`group.protocol=classic` to `consumer` one by one, and back, keeping offsets and assignment.

Upgrade: a ConsumerGroupHeartbeat joining a classic group of the consumer protocol type
turns it into a KIP-848 group. Its group epoch and target-assignment epoch are the classic
generation; each classic member becomes a member at that epoch, Stable, holding the
partitions of its last SyncGroup assignment (which are its target too), with its session
timeout and JoinGroup protocols kept (ClassicMetadata): it goes on being served through
JoinGroup/SyncGroup/Heartbeat (classic_members.py). Waiting JoinGroups and SyncGroups are
answered REBALANCE_IN_PROGRESS, so their members join the new group.

Downgrade: when the last member on the consumer protocol leaves or is fenced, and members
remain (all classic), the group becomes a classic group again at generation = group epoch,
Stable, its members given their target assignment as SyncGroup bytes; a rebalance starts at
once, so the classic members join and their leader assigns as before.

`group.consumer.migration.policy` (Kafka's internal setting; its default, bidirectional):
which of the two conversions are allowed. A group over the other protocol's size limit is
not converted, as Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from seglog.errors import GroupIdNotFoundError, SeglogError

from ..cluster.registry import Registry
from . import consumer_group_records as records
from .classic_handover import ClassicHandover
from .classic_protocol import select_protocol
from .consumer_group_state import ClassicMetadata, ConsumerGroup, ConsumerMember, nested
from .consumer_group_targets import subscribed_metadata
from .consumer_protocol import assignment_partitions, subscription_topics
from .group_state import CLASSIC, STABLE, Group, Member
from .offsets_formats import CONSUMER_PROTOCOL_TYPE, encode_assignment

logger = logging.getLogger(__name__)

# Kafka's ConsumerGroupMigrationPolicy values.
DISABLED, UPGRADE, DOWNGRADE, BIDIRECTIONAL = "disabled", "upgrade", "downgrade", "bidirectional"
MIGRATION_POLICIES = (DISABLED, UPGRADE, DOWNGRADE, BIDIRECTIONAL)
DEFAULT_MIGRATION_POLICY = BIDIRECTIONAL


def upgrade_enabled(policy: str) -> bool:
    return policy in (UPGRADE, BIDIRECTIONAL)


def downgrade_enabled(policy: str) -> bool:
    return policy in (DOWNGRADE, BIDIRECTIONAL)


def can_upgrade(group: Group, policy: str, max_size: int) -> bool:
    """Kafka's validateOnlineUpgrade: allowed, a consumer-protocol classic group, not too big."""
    return (
        upgrade_enabled(policy)
        and group.kind == CLASSIC
        and group.protocol_type == CONSUMER_PROTOCOL_TYPE
        and bool(group.members)
        and len(group.members) <= max_size
    )


def can_downgrade(group: ConsumerGroup, leaving: str, policy: str, max_size: int) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMember: `leaving` is fenced, every other
    member is classic, and some remain (no more than the classic group's max size)."""
    rest = [m for m in group.members.values() if m.member_id != leaving]
    return (
        downgrade_enabled(policy)
        and bool(rest)
        and all(m.classic is not None for m in rest)
        and len(rest) <= max_size
    )


def consumer_group_from_classic(
    classic: Group, topic_id_of: Callable[[str], str | None], now: float
) -> ConsumerGroup:
    """The KIP-848 group a classic one becomes (ConsumerGroup.fromClassicGroup); partitions
    of topics that no longer exist are left out."""
    group = ConsumerGroup(classic.group_id, epoch=classic.generation)
    group.assignment_epoch = classic.generation
    for old in classic.members.values():
        pairs: set[tuple[str, int]] = set()
        for name, partitions in assignment_partitions(old.assignment_bytes).items():
            topic_id = topic_id_of(name)
            if topic_id:
                pairs.update((topic_id, p) for p in partitions)
        subscription = old.metadata_for(classic.strategy) or (
            old.protocols[0][1] if old.protocols else b""
        )
        member = ConsumerMember(
            old.member_id,
            client_id=old.client_id,
            client_host=old.client_host,
            instance_id=old.group_instance_id,
            topics=tuple(sorted(set(subscription_topics(subscription)))),
            rebalance_timeout_ms=int(old.rebalance_timeout_s * 1000),
            member_epoch=classic.generation,
            previous_member_epoch=classic.generation,
            assigned=nested(pairs),
            assignment_epochs=dict.fromkeys(pairs, classic.generation),
            last_heartbeat=now,
            classic=ClassicMetadata(int(old.session_timeout_s * 1000), old.protocols),
        )
        group.members[member.member_id] = member
        group.target[member.member_id] = nested(pairs)
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
    return group


def classic_group_from_consumer(
    group: ConsumerGroup, leaving: str, topic_name_of: Callable[[str], str | None], now: float
) -> Group:
    """The classic group a consumer group becomes without `leaving`
    (ClassicGroup.fromConsumerGroup): Stable at generation = group epoch, each member's
    target assignment as its SyncGroup bytes, the first member its leader."""
    classic = Group(group.group_id, state=STABLE, generation=group.epoch, kind=CLASSIC)
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    classic.state_timestamp_ms = time.time_ns() // 1_000_000
    for member in group.members.values():
        if member.member_id == leaving or member.classic is None:
            continue
        assignment: dict[str, list[int]] = {}
        for topic_id, partitions in group.target.get(member.member_id, {}).items():
            name = topic_name_of(topic_id)
            if name:
                assignment[name] = sorted(partitions)
        protocols = member.classic.protocols
        new = Member(
            member.member_id,
            member.client_id,
            member.client_host,
            subscription_topics(protocols[0][1]) if protocols else (),
            tuple(name for name, _ in protocols),
            member.classic.session_timeout_ms / 1000,
            member.rebalance_timeout_ms / 1000,
            now,
            assignment={t: list(ps) for t, ps in assignment.items()},
            protocols=protocols,
            group_instance_id=member.instance_id,
            assignment_bytes=encode_assignment(assignment),
        )
        classic.members[new.member_id] = new
        classic.leader = classic.leader or new.member_id
    classic.strategy = select_protocol(classic)
    return classic


class GroupMigrations:
    """The conversions done for ConsumerGroups (which holds the groups and their locks):
    `config` is its ConsumerGroupsConfig, `persist` its records' writer."""

    def __init__(
        self,
        registry: Registry,
        config: Any,
        classic: ClassicHandover,
        persist: Callable[[str, list[records.Record]], None] | None,
    ) -> None:
        self.registry = registry
        self.policy: str = config.group_consumer_migration_policy
        self.max_size: int = config.group_max_size
        self.classic_max_size: int = config.classic_group_max_size
        self.classic = classic
        self._persist = persist

    def upgrade(
        self, group_id: str, install: Callable[[ConsumerGroup], None]
    ) -> ConsumerGroup | None:
        """The classic group with members converted and `install`ed while the classic
        coordinator gives it up, under its lock (so no classic join makes the id a classic
        group again in between); None when it has none; GroupIdNotFoundError when it may not
        be converted, as Kafka."""
        if not self.classic.members(group_id):
            return None
        converted: list[ConsumerGroup] = []

        def accept(classic: Group) -> bool:
            if not can_upgrade(classic, self.policy, self.max_size):
                return False
            topics = self.registry.topics
            group = consumer_group_from_classic(
                classic, lambda name: getattr(topics.get(name), "topic_id", None), time.monotonic()
            )
            group.topic_metadata = subscribed_metadata(self.registry, group)
            install(group)
            converted.append(group)
            return True

        if self.classic.take(group_id, accept) is None:
            raise GroupIdNotFoundError(f"group {group_id!r} is not a consumer group")
        logger.info("group %s: upgraded to the consumer protocol", group_id)
        return converted[0]

    def downgrades(self, before: ConsumerGroup, after: ConsumerGroup) -> bool:
        """Did the change fence the group's last member on the consumer protocol, leaving
        classic members only (Kafka's validateOnlineDowngradeWithFencedMember)?"""
        return (
            downgrade_enabled(self.policy)
            and any(m.classic is None for m in before.members.values())
            and bool(after.members)
            and all(m.classic is not None for m in after.members.values())
            and len(after.members) <= self.classic_max_size
        )

    def downgrade(self, before: ConsumerGroup, after: ConsumerGroup) -> None:
        """The consumer group's records tombstoned (raises if they cannot be: the caller
        keeps the group as it was), then the classic group handed to its coordinator."""
        group_id = after.group_id
        classic = classic_group_from_consumer(after, "", self._topic_name, time.monotonic())
        tombstones = []
        for member_id in before.members:
            tombstones += [
                records.current_assignment(group_id, member_id, None),
                records.target_member(group_id, member_id, None),
                records.member_metadata(group_id, member_id, None),
            ]
        tombstones.append(records.assignment_epoch(group_id, None))
        tombstones.append(records.group_epoch(group_id, None))
        if self._persist is not None:
            self._persist(group_id, tombstones)
        self.classic.adopt(classic)
        logger.info("group %s: downgraded to the classic protocol", group_id)

    def _topic_name(self, topic_id: str) -> str | None:
        try:
            return self.registry.topic_name_of(topic_id)
        except SeglogError:
            return None  # deleted since: its partitions are left out
