"""The KIP-848 consumer group coordinator: ConsumerGroupHeartbeat's state machine (Kafka's
GroupMetadataManager.consumerGroupHeartbeat), the offset checks of members (OffsetCommit and
OffsetFetch against member epochs) and the groups' descriptions. The state and the
reconciliation are consumer_group_state.py's, the assignors server_assignors.py's, the
records consumer_group_records.py's.

A heartbeat, in Kafka's order: the request checked; the group found (made on a join, read
back from `__consumer_offsets` on first touch after a start or a failover); the member found
(a join makes it, or takes a static member's place) and fenced if its epoch is neither its
current one nor, with owned partitions inside its assignment, its previous one; its
subscription updated; the group epoch bumped when a member joined or changed its
subscription or a subscribed topic changed; the target assignment computed when the group
epoch is past it; the member reconciled. The records of what changed are appended (acks=all)
before the answer goes out; if they cannot be, the group is put back as it was and the member
retries. Members that miss their session (group.consumer.session.timeout.ms) or do not revoke
within their rebalance timeout are removed by a reaper thread, as Kafka's timers do.
Online migration to and from classic groups: group_migration.py, classic_members.py.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from seglog.coordinator_errors import UnreleasedInstanceIdError
from seglog.errors import (
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    NonEmptyGroupError,
    SeglogError,
    UnknownMemberIdError,
)

from ..cluster.group_configs import GroupConfig
from ..cluster.registry import Registry
from . import consumer_group_records as records
from .classic_handover import ClassicHandover
from .consumer_group_checks import (
    ConsumerHeartbeat,
    check_commit_epoch,
    check_fetch_epoch,
    check_request,
    fence,
    update_subscription,
)
from .consumer_group_replay import diff_records, replay
from .consumer_group_state import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    expired_members,
    flat,
    reconcile,
)
from .consumer_group_targets import (
    assign_targets,
    bump_epoch_if_changed,
    check_regex_access,
    member_topics,
    subscribed_metadata,
)
from .group_migration import DEFAULT_MIGRATION_POLICY, GroupMigrations

logger = logging.getLogger(__name__)

# Kafka's defaults: group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms.
DEFAULT_CONSUMER_SESSION_TIMEOUT_MS = 45_000
DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS = 5_000


@dataclass(frozen=True)
class ConsumerGroupsConfig:
    group_consumer_session_timeout_ms: int = DEFAULT_CONSUMER_SESSION_TIMEOUT_MS
    group_consumer_heartbeat_interval_ms: int = DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS
    group_max_size: int = 1000
    # Kafka's group.consumer.migration.policy (group_migration.py) and group.max.size, the
    # classic groups' bound a downgraded group must fit.
    group_consumer_migration_policy: str = DEFAULT_MIGRATION_POLICY
    classic_group_max_size: int = 1000


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None  # None: unchanged since the last answer


class ConsumerGroups:
    def __init__(
        self,
        registry: Registry,
        config: ConsumerGroupsConfig,
        load: Callable[[str], Mapping[bytes, bytes]] | None = None,
        persist: Callable[[str, list[records.Record]], None] | None = None,
        classic: ClassicHandover | None = None,
        group_config: Callable[[str], GroupConfig] | None = None,
    ) -> None:
        self.registry = registry
        self.group_config = group_config  # a group's own session/heartbeat (group_configs.py)
        self.config = config
        self._load = load
        self._persist = persist
        self._classic = classic  # the classic coordinator, for online migrations
        self._migrations = (
            GroupMigrations(registry, config, classic, persist) if classic is not None else None
        )
        self._lock = threading.Lock()  # the dicts below; a group's own lock guards the group
        self._groups: dict[str, ConsumerGroup] = {}
        self._group_locks: dict[str, threading.Lock] = {}
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="consumer-groups", daemon=True)

    def start(self) -> None:
        self._reaper.start()

    def stop(self) -> None:
        self._stop.set()

    def _group_lock(self, group_id: str) -> threading.Lock:
        with self._lock:
            return self._group_locks.setdefault(group_id, threading.Lock())

    # -- ConsumerGroupHeartbeat ---------------------------------------------------------------

    def heartbeat(self, hb: ConsumerHeartbeat) -> HeartbeatAnswer:
        check_request(hb)
        with self._group_lock(hb.group_id):
            upgraded = self._upgrade(hb.group_id) if hb.member_epoch == 0 else None
            group = upgraded or self._get(hb.group_id, create=hb.member_epoch == 0)
            # An upgraded group is written whole: every record of it is new.
            before = ConsumerGroup(hb.group_id) if upgraded else copy.deepcopy(group)
            try:
                answer = self._heartbeat(group, hb, time.monotonic())
                self._write(before, group)
            except BaseException:
                if upgraded is None:
                    self._put_back(before)
                else:  # its classic members meet an unknown group and join it anew
                    with self._lock:
                        self._groups.pop(hb.group_id, None)
                raise
            return answer

    @contextlib.contextmanager
    def changing(self, group_id: str) -> Iterator[ConsumerGroup]:
        """The group (GroupIdNotFoundError for none), changed by the caller under its lock:
        the records of the change written when the block ends, or the group put back as it
        was if the block or the write raises (classic_members.py's calls)."""
        with self._group_lock(group_id):
            group = self._get(group_id, create=False)
            before = copy.deepcopy(group)
            try:
                yield group
                self._write(before, group)
            except BaseException:
                self._put_back(before)
                raise

    def _heartbeat(
        self, group: ConsumerGroup, hb: ConsumerHeartbeat, now: float
    ) -> HeartbeatAnswer:
        interval, _ = self._timing_ms(group.group_id)
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            member = self._existing(group, hb)
            if hb.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
                member.member_epoch = STATIC_LEAVE_EPOCH
                member.pending_revocation = {}
            else:
                self.remove_member(group, member.member_id)
            return HeartbeatAnswer(hb.member_id, hb.member_epoch, interval, None)
        if hb.member_epoch == 0:
            member, joined = self._joining(group, hb, now)
        else:
            member, joined = self._existing(group, hb), False
            fence(member, hb)
        previous = flat(member.assigned)
        changed = update_subscription(member, hb)
        if hb.topic_describable is not None:
            check_regex_access(self.registry, member, hb.topic_describable, now)
        member.last_heartbeat = now
        bump_epoch_if_changed(self.registry, group, joined or changed)
        assign_targets(self.registry, group)
        reconcile(group, member, hb.owned, now)
        full = (
            hb.rebalance_timeout_ms != -1
            and hb.owned is not None
            and (hb.topics is not None or hb.regex is not None)
        )
        assignment = member.assigned if full or flat(member.assigned) != previous else None
        return HeartbeatAnswer(member.member_id, member.member_epoch, interval, assignment)

    def _joining(
        self, group: ConsumerGroup, hb: ConsumerHeartbeat, now: float
    ) -> tuple[ConsumerMember, bool]:
        member_id = hb.member_id or str(uuid.uuid4())  # v0: the coordinator may name it
        member = group.members.get(member_id)
        if member is not None:
            return member, False  # its join's answer was lost: the same member again
        holder = group.static_members.get(hb.instance_id) if hb.instance_id else None
        if holder is not None and holder in group.members:
            old = group.members[holder]
            if old.member_epoch != STATIC_LEAVE_EPOCH:
                raise UnreleasedInstanceIdError(
                    f"instance id {hb.instance_id} is still held by member {holder}"
                )
            # A static member back: it takes its old place, assignment and target (Kafka
            # replaces the member without a new group epoch).
            del group.members[holder]
            member = copy.deepcopy(old)
            member.member_id = member_id
            member.member_epoch = member.previous_member_epoch = 0
            group.members[member_id] = member
            group.target[member_id] = group.target.pop(holder, {})
            group.static_members[hb.instance_id or ""] = member_id
            return member, False
        if len(group.members) >= self.config.group_max_size:
            raise GroupMaxSizeReachedError(
                f"group {group.group_id} has {len(group.members)} members, its most"
            )
        member = ConsumerMember(member_id, last_heartbeat=now)
        group.members[member_id] = member
        if hb.instance_id:
            group.static_members[hb.instance_id] = member_id
        return member, True

    def _existing(self, group: ConsumerGroup, hb: ConsumerHeartbeat) -> ConsumerMember:
        member = group.members.get(hb.member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {hb.member_id} is not in group {group.group_id}")
        return member

    def remove_member(self, group: ConsumerGroup, member_id: str) -> None:  # group held
        member = group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        if member is not None and member.instance_id is not None:
            group.static_members.pop(member.instance_id, None)
        group.epoch += 1

    # -- offsets checked against member epochs --------------------------------------------------

    def is_consumer_group(self, group_id: str) -> bool:
        return self._get(group_id, create=False, missing_ok=True) is not None

    def holds(self, group_id: str) -> bool:
        """Is the group here (the classic coordinator's check, under its lock: no I/O)?"""
        with self._lock:
            return group_id in self._groups

    def has_members(self, group_id: str) -> bool:
        """A consumer group with members (False while its records cannot be read)."""
        try:
            group = self._get(group_id, create=False, missing_ok=True)
        except SeglogError:
            return False
        return group is not None and bool(group.members)

    def check_commit(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        api_version: int,
        partitions: Sequence[tuple[str, int]] = (),
    ) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit (consumer_group_checks.py)."""
        with self._group_lock(group_id):
            group = self._get(group_id, create=False)
            topics = self.registry.topics
            ids = {n: getattr(topics.get(n), "topic_id", "") for n, _ in partitions}
            check_commit_epoch(group, member_id, epoch, api_version, partitions, ids)

    def check_fetch(self, group_id: str, member_id: str | None, epoch: int) -> None:
        """OffsetFetch v9+ naming a member of a KIP-848 group: it must be in the group at
        that epoch. A classic group's (or no group's) fetch is not checked, as Kafka's
        ClassicGroup.validateOffsetFetch checks no member: clients such as franz-go name
        their classic member and generation in v9 fetches too."""
        if member_id is None or not member_id:
            return
        with self._group_lock(group_id):
            group = self._get(group_id, create=False, missing_ok=True)
            if group is not None:
                check_fetch_epoch(group, member_id, epoch)

    # -- description and listing ----------------------------------------------------------------

    def describe(self, group_id: str) -> ConsumerGroup:
        """A copy of the group (GroupIdNotFoundError for none, as Kafka answers)."""
        with self._group_lock(group_id):
            return copy.deepcopy(self._get(group_id, create=False))

    def snapshots(self) -> list[ConsumerGroup]:
        with self._lock:
            ids = list(self._groups)
        out = []
        for group_id in ids:
            with self._group_lock(group_id):
                group = self._groups.get(group_id)
                if group is not None:
                    out.append(copy.deepcopy(group))
        return out

    def subscribed_topics(self, group_id: str) -> set[str]:
        with self._lock:
            group = self._groups.get(group_id)
        if group is None:
            return set()
        with self._group_lock(group_id):
            return {n for m in group.members.values() for n in member_topics(self.registry, m)}

    def delete_group(self, group_id: str) -> bool:
        """Forget an empty consumer group and tombstone its records; False: none here."""
        with self._group_lock(group_id):
            group = self._get(group_id, create=False, missing_ok=True)
            if group is None:
                return False
            if group.members:
                raise NonEmptyGroupError(f"group {group_id} has {len(group.members)} members")
            if self._persist is not None:
                self._persist(
                    group_id,
                    [records.assignment_epoch(group_id, None), records.group_epoch(group_id, None)],
                )
            with self._lock:
                self._groups.pop(group_id, None)
            return True

    def forget_groups(self, belongs: Callable[[str], bool]) -> None:
        """Drop the groups whose coordination moved away (read back if it comes back)."""
        with self._lock:
            for group_id in [g for g in self._groups if belongs(g)]:
                del self._groups[group_id]

    # -- loading, writing, expiring -------------------------------------------------------------

    def _get(self, group_id: str, create: bool, missing_ok: bool = False) -> ConsumerGroup:
        with self._lock:
            group = self._groups.get(group_id)
        if group is None and self._load is not None:
            stored = self._load(group_id)
            if stored:
                group = replay(group_id, stored, time.monotonic())
                if group is not None:
                    group.topic_metadata = subscribed_metadata(self.registry, group)
        if group is None:
            if not create:
                if missing_ok:
                    return None  # type: ignore[return-value]
                raise GroupIdNotFoundError(f"consumer group {group_id!r} not found")
            if self._classic is not None and self._classic.members(group_id):
                raise GroupIdNotFoundError(f"group {group_id!r} is not a consumer group")
            group = ConsumerGroup(group_id)
        with self._lock:
            return self._groups.setdefault(group_id, group)

    def _upgrade(self, group_id: str) -> ConsumerGroup | None:
        """A classic group with members turned into a consumer group held here (None: there
        is none to convert; GroupIdNotFoundError: one that may not be)."""
        with self._lock:
            if group_id in self._groups or self._migrations is None:
                return None

        def install(group: ConsumerGroup) -> None:  # under the classic coordinator's lock
            with self._lock:
                self._groups[group_id] = group

        return self._migrations.upgrade(group_id, install)

    def _put_back(self, before: ConsumerGroup) -> None:
        with self._lock:
            self._groups[before.group_id] = before

    def _write(self, before: ConsumerGroup, after: ConsumerGroup) -> None:
        if self._migrations is not None and self._migrations.downgrades(before, after):
            self._migrations.downgrade(before, after)
            with self._lock:
                self._groups.pop(after.group_id, None)
            return
        written = diff_records(before, after)
        if written and self._persist is not None:
            self._persist(after.group_id, written)

    def _timing_ms(self, group_id: str) -> tuple[int, int]:
        """The group's (heartbeat interval, session timeout): a look-up by its id."""
        if self.group_config is None:
            c = self.config
            return c.group_consumer_heartbeat_interval_ms, c.group_consumer_session_timeout_ms
        own = self.group_config(group_id)
        return own.consumer_heartbeat_interval_ms, own.consumer_session_timeout_ms

    def _reap_loop(self) -> None:
        while not self._stop.wait(0.1):
            self.reap(time.monotonic())

    def reap(self, now: float) -> None:
        with self._lock:
            ids = list(self._groups)
        for group_id in ids:
            with self._group_lock(group_id):
                group = self._groups.get(group_id)
                if group is None:
                    continue
                doomed = expired_members(group, now, self._timing_ms(group_id)[1] / 1000)
                if not doomed:
                    continue  # the common case: nothing copied, nothing written
                before = copy.deepcopy(group)
                for member_id, late in doomed:
                    logger.info(
                        "group %s: member %s %s: removed",
                        group_id,
                        member_id,
                        "missed its session" if late else "did not revoke in its rebalance timeout",
                    )
                    self.remove_member(group, member_id)
                try:
                    self._write(before, group)
                except SeglogError as exc:
                    logger.warning("group %s: writing its records failed: %s", group_id, exc)
                    self._put_back(before)


__all__ = ["ConsumerGroups", "ConsumerGroupsConfig", "ConsumerHeartbeat", "HeartbeatAnswer"]
