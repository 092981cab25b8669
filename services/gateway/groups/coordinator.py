"""The group coordinator: consumer group membership, rebalances and committed offsets.

States (Kafka's names): Empty (no members), PreparingRebalance (waiting for members to join
again), Stable (a generation with an assignment). A rebalance starts when a member joins,
leaves, or misses its session timeout, and when a topic the group subscribes to is created,
deleted or changes its partition count; members learn of it from their heartbeats
(REBALANCE_IN_PROGRESS) and call JoinGroup again. It completes when every known member has
joined, or when the longest rebalance timeout of the members passes (those still missing
are removed). The first rebalance of an empty group waits `initial_rebalance_delay_ms`
(Kafka's group.initial.rebalance.delay.ms) so that consumers started together land in one
generation. For seglog's own consumers (the gRPC path) the coordinator computes the
assignment itself (range or roundrobin, the first strategy in the first member's list that
every member supports); for Kafka clients it runs Kafka's classic protocol, where a leader
member computes it (classic_protocol.py, and its extra state CompletingRebalance). A group's
members are of one kind at a time (group_state.py); its committed offsets are the same
whichever API commits or reads them.

Membership is held in memory: after a gateway restart, members get UNKNOWN_MEMBER_ID on their
next heartbeat and join anew (Kafka's static members take their stored place back).
Committed offsets are durable (offsets_store.py), and so is each group's GroupMetadata
record, as Kafka writes it: after every completed rebalance and when the group becomes empty
(its timestamp starts the offsets' retention clock). Those records are written by a thread of
their own, never under the coordinator's lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from seglog.errors import (
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    SeglogError,
    UnknownMemberIdError,
)

from ..cluster.registry import Registry
from .classic_protocol import (
    ClassicProtocol,
    complete_classic_join,
    named_member,
    restore_static_members,
)
from .classic_waits import settling
from .group_metadata_writer import GroupMetadataWriter
from .group_state import (
    CLASSIC,
    COMPLETING_REBALANCE,
    EMPTY,
    MANAGED,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    JoinResult,
    Member,
    check_group_id,
    has_stable_members,
    kept_at_completion,
    metadata_record,
)
from .managed_protocol import ManagedProtocol, complete_managed_join
from .offsets_formats import GroupMetadata

logger = logging.getLogger(__name__)


# Kafka's group.initial.rebalance.delay.ms, group.min/max.session.timeout.ms defaults.
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 3000
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
# Kafka's group.max.size defaults to 2^31 - 1, no bound; seglog bounds a group's members (and
# so each rebalance's work and the joins it waits for) at 1000.
DEFAULT_GROUP_MAX_SIZE = 1000


@dataclass(frozen=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS
    min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS
    group_max_size: int = DEFAULT_GROUP_MAX_SIZE


class GroupCoordinator:
    def __init__(
        self,
        registry: Registry,
        config: CoordinatorConfig,
        persist: Callable[[str, GroupMetadata], None] | None = None,
        load: Callable[[str], GroupMetadata | None] | None = None,
    ) -> None:
        self.registry = registry
        # Reads a group's last GroupMetadata record, so a coordinator that starts or takes
        # over continues its generations (Kafka's loadGroupsAndOffsets).
        self._load = load
        self.config = config
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._groups: dict[str, Group] = {}
        # Whether a KIP-848 group holds the id (set by the composition root; classic_handover).
        self.held_elsewhere: Callable[[str], bool] = lambda group_id: False
        self._writer = GroupMetadataWriter(persist) if persist is not None else None
        self._stop = threading.Event()
        self.classic = ClassicProtocol(self)  # the join protocols, on these groups
        self.managed = ManagedProtocol(self)
        self._reaper = threading.Thread(target=self._reap_loop, name="group-sessions", daemon=True)
        self._reaper.start()

    def close(self) -> None:
        self._stop.set()
        if self._writer is not None:
            self._writer.close()
        with settling(self) as touched:  # waiting classic calls end
            touched.extend(self._groups.values())
            self._changed.notify_all()

    # -- membership --------------------------------------------------------------------------

    def _check_session_timeout(self, session_timeout_ms: int) -> None:
        low, high = self.config.min_session_timeout_ms, self.config.max_session_timeout_ms
        if not low <= session_timeout_ms <= high:
            raise InvalidSessionTimeoutError(
                f"session_timeout_ms {session_timeout_ms} is outside the coordinator's "
                f"range [{low}, {high}]"
            )

    def _check_room(self, group: Group, member_id: str) -> None:
        """A member not in the group yet (new, or pending with the id MEMBER_ID_REQUIRED
        gave it) joins only below group.max.size, counting pending members, as Kafka's
        acceptJoiningMember."""
        if member_id in group.members:
            return
        others = (
            len(group.members) + len(group.pending_members) - (member_id in group.pending_members)
        )
        if others >= self.config.group_max_size:
            raise GroupMaxSizeReachedError(
                f"group {group.group_id} has {others} members, its most (group.max.size "
                f"{self.config.group_max_size})"
            )

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        group_instance_id: str | None = None,
    ) -> None:
        stored = self._stored_if_readable(group_id)
        with self._lock:
            self._load_stored(group_id, stored)
            group, member = self._member(group_id, member_id, group_instance_id)
            member.last_heartbeat = time.monotonic()
            if group.state == PREPARING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id} is rebalancing: join again")
            if generation != group.generation:
                raise IllegalGenerationError(
                    f"generation {generation} of group {group_id} is stale; "
                    f"the current one is {group.generation}"
                )

    def leave(self, group_id: str, member_id: str) -> None:
        with settling(self) as touched:
            group, _ = self._member(group_id, member_id)
            touched.append(group)
            self._remove(group, member_id, time.monotonic())

    def check_commit(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        group_instance_id: str | None = None,
    ) -> None:
        """May this commit proceed? A member commits for its current generation (during a
        rebalance too, so it can commit before joining again; not while its group waits for
        the classic leader's assignment); a commit with generation -1 (manual assignment, an
        admin tool) only while the group has no members."""
        check_group_id(group_id)
        stored = self._stored_if_readable(group_id)
        with self._lock:
            group = self._load_stored(group_id, stored)
            if generation < 0 and (group is None or not group.members):
                return
            if not member_id and generation < 0:
                raise UnknownMemberIdError(
                    f"group {group_id} has active members: only they may commit"
                )
            # A group not loaded yet has no trusted members: its old ones must rejoin.
            if group is None:
                raise UnknownMemberIdError(f"member {member_id} is not in group {group_id}")
            group, _ = self._member(group_id, member_id, group_instance_id)
            if generation != group.generation:
                raise IllegalGenerationError(
                    f"generation {generation} of group {group_id} is stale; "
                    f"the current one is {group.generation}"
                )
            if group.state == COMPLETING_REBALANCE:
                raise RebalanceInProgressError(
                    f"group {group_id} is waiting for its leader's assignment"
                )
            group.members[member_id].last_heartbeat = time.monotonic()

    # -- description ------------------------------------------------------------------------

    def snapshot(self, group_id: str) -> Group | None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return None
            return replace(
                group,
                members={m.member_id: m.copy() for m in group.members.values()},
                partition_counts=dict(group.partition_counts),
                pending_members=dict(group.pending_members),
                pending_sync=set(group.pending_sync),
            )

    def group_ids(self) -> list[str]:
        with self._lock:
            return list(self._groups)

    def delete_group(self, group_id: str) -> None:
        """Forget an empty group (its offsets and record are the store's to delete)."""
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None and group.members:
                raise NonEmptyGroupError(
                    f"group {group_id} has {len(group.members)} active members: only an "
                    f"empty group can be deleted"
                )
            self._groups.pop(group_id, None)
            if self._writer is not None:
                self._writer.discard(group_id)

    def forget_groups(self, belongs: Callable[[str], bool]) -> None:
        """Drop the groups for which `belongs(group_id)` (their coordination moved away):
        waiting joins end and the members meet the new coordinator."""
        with settling(self) as touched:
            for group_id in [g for g in self._groups if belongs(g)]:
                touched.append(self._groups[group_id])
                self._groups.pop(group_id).members.clear()
                if self._writer is not None:
                    self._writer.discard(group_id)
            self._changed.notify_all()

    def subscribed_topics(self, group_id: str) -> set[str]:
        with self._lock:
            group = self._groups.get(group_id)
            return {t for m in group.members.values() for t in m.topics} if group else set()

    def groups_with_members(self) -> set[str]:
        with self._lock:
            return {g.group_id for g in self._groups.values() if g.members}

    def wait_persisted(self, timeout_s: float) -> bool:
        """Have the GroupMetadata records of every change so far been handed to the store?"""
        return self._writer is None or self._writer.wait_idle(timeout_s)

    def _state_changed(self, group: Group) -> None:
        """Record the change's time, queue its GroupMetadata record (lock held; a thread writes)."""
        group.state_timestamp_ms = time.time_ns() // 1_000_000
        if self._writer is not None:
            self._writer.submit(group.group_id, metadata_record(group))

    def _stored(self, group_id: str) -> GroupMetadata | None:
        """The group's last GroupMetadata record if this coordinator has not loaded the group
        yet (read without the lock: it may ask a storage node)."""
        if self._load is None:
            return None
        with self._lock:
            if group_id in self._groups:
                return None
        return self._load(group_id)

    def _stored_if_readable(self, group_id: str) -> GroupMetadata | None:
        """`_stored` for calls of members already known (heartbeats, commits, syncs): when
        the record cannot be read now, the call is answered as before a load (an unknown
        member joins again) rather than failed."""
        try:
            return self._stored(group_id)
        except SeglogError as exc:
            logger.info("group %s: its record is not readable yet: %s", group_id, exc)
            return None

    # -- the state machine (callers hold the lock) ----------------------------------------------

    def _group(self, group_id: str, stored: GroupMetadata | None) -> Group:
        """The group, loaded on first touch: its generation and protocol continue from the
        stored record, so the next rebalance is generation + 1. The stored members are not
        taken back: they are trusted again only once they rejoin, so a commit or heartbeat
        from the old generation is refused instead of moving offsets back; Kafka's static
        members apart (classic_protocol.py), whose place is kept."""
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id)
            if stored is not None:
                group.generation = stored.generation
                group.strategy = stored.protocol or ""
                restore_static_members(group, stored, time.monotonic())
        return group

    def _load_stored(self, group_id: str, stored: GroupMetadata | None) -> Group | None:
        """The group, loaded from its record if it has one (so its static members answer
        for themselves); None for a group this coordinator neither holds nor has a record
        of (which a stray call does not create)."""
        group = self._groups.get(group_id)
        if group is None and stored is not None:
            group = self._group(group_id, stored)
        return group

    def _member(
        self, group_id: str, member_id: str, group_instance_id: str | None = None
    ) -> tuple[Group, Member]:
        group = self._groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"member {member_id} is not in group {group_id}")
        return group, named_member(group, member_id, group_instance_id)

    def _begin_rebalance(self, group: Group, now: float) -> None:
        group.initial_rebalance = not has_stable_members(group)
        if group.initial_rebalance:
            wait_s = self.config.initial_rebalance_delay_ms / 1000
        else:
            wait_s = max((m.rebalance_timeout_s for m in group.members.values()), default=0.0)
        group.state = PREPARING_REBALANCE
        group.rebalance_deadline = now + wait_s
        group.pending_sync.clear()
        self._changed.notify_all()

    def _maybe_complete(self, group: Group, now: float) -> None:
        if group.state != PREPARING_REBALANCE:
            return
        everyone_joined = all(m.joining for m in group.members.values()) and not (
            group.pending_members
        )
        if (everyone_joined and not group.initial_rebalance) or now >= group.rebalance_deadline:
            self._complete_rebalance(group, now)

    def _complete_rebalance(self, group: Group, now: float) -> None:
        gone = [m.member_id for m in group.members.values() if not kept_at_completion(group, m)]
        for member_id in gone:
            del group.members[member_id]  # did not join again in time
        if group.members and not any(m.joining for m in group.members.values()):
            # Only static members that have not joined are left: Kafka waits another
            # rebalance timeout for them (their sessions may end them first).
            group.rebalance_deadline = now + max(
                m.rebalance_timeout_s for m in group.members.values()
            )
            return
        if not group.members:
            self._empty(group)
            self._changed.notify_all()
            return
        if group.kind == CLASSIC:
            complete_classic_join(group, now)
            group.state_timestamp_ms = time.time_ns() // 1_000_000
            self._changed.notify_all()
            return
        complete_managed_join(group, now, self._partition_counts(group))
        self._state_changed(group)
        self._changed.notify_all()

    def _partition_counts(self, group: Group) -> dict[str, int]:
        counts = {}
        for topic in sorted({t for m in group.members.values() for t in m.topics}):
            described = self.registry.topics.get(topic)
            if described is not None:
                counts[topic] = len(described.partitions)
        return counts

    def _empty(self, group: Group) -> None:
        group.state = EMPTY
        group.generation += 1
        group.pending_sync.clear()
        if group.kind == CLASSIC:  # Kafka's empty group has no protocol or leader
            group.strategy = group.leader = ""
        self._state_changed(group)

    def _remove(self, group: Group, member_id: str, now: float) -> None:
        group.members.pop(member_id, None)
        group.pending_sync.discard(member_id)
        if not group.members:
            if group.state != EMPTY:
                self._empty(group)
            self._changed.notify_all()
            return
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._begin_rebalance(group, now)
        self._maybe_complete(group, now)
        self._changed.notify_all()

    def _reap_loop(self) -> None:
        while not self._stop.wait(0.05):
            now = time.monotonic()
            with settling(self) as touched:  # joins and syncs whose time is up end
                touched.extend(self._groups.values())
                for group in list(self._groups.values()):
                    for member in list(group.members.values()):
                        if member.joining or member.awaiting_sync:
                            continue  # waiting in JoinGroup or SyncGroup counts as alive
                        if now - member.last_heartbeat > member.session_timeout_s:
                            self._remove(group, member.member_id, now)
                    for member_id, deadline in list(group.pending_members.items()):
                        if now >= deadline:  # given an id, never joined with it
                            del group.pending_members[member_id]
                            self._maybe_complete(group, now)
                    if group.state == PREPARING_REBALANCE and now >= group.rebalance_deadline:
                        self._complete_rebalance(group, now)
                    elif group.state == COMPLETING_REBALANCE and now >= group.rebalance_deadline:
                        for member_id in list(group.pending_sync):  # never sent SyncGroup
                            self._remove(group, member_id, now)
                    elif (
                        group.state == STABLE
                        and group.kind == MANAGED
                        and self._partition_counts(group) != group.partition_counts
                    ):
                        # A subscribed topic came, went or changed: assign again, as
                        # Kafka's consumers do when their metadata shows it.
                        logger.info("topics of group %s changed: rebalancing", group.group_id)
                        self._begin_rebalance(group, now)


__all__ = [
    "COMPLETING_REBALANCE",
    "EMPTY",
    "PREPARING_REBALANCE",
    "STABLE",
    "CoordinatorConfig",
    "Group",
    "GroupCoordinator",
    "JoinResult",
    "Member",
    "SeglogError",
    "check_group_id",
]
