"""Share groups' membership (KIP-932's ShareGroupHeartbeat): members join at epoch 0 with
the topics they subscribe to, heartbeat at their epoch, leave at -1, and are dropped when
they miss group.share.session.timeout.ms of heartbeats. The assignment is the coordinator's
own, Kafka's simple assignor (group-coordinator's SimpleAssignor): every partition of the
subscribed topics goes to at least one member, and with more members than partitions a
partition goes to several members (they share it: that is what share groups are for).

    members >= partitions   member i gets partition i mod P (each partition shared)
    members <  partitions   partition j goes to member j mod M

Every change of members, subscriptions or the subscribed topics' partitions bumps the group
epoch and computes the target assignment again; a member is told its assignment (with the
group epoch as its member epoch) on the heartbeat after it changed, null otherwise, as
Kafka's coordinator answers. Share groups need no revocation step: a partition may be
fetched by old and new owners at once, records are locked one by one.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from seglog.coordinator_errors import FencedMemberEpochError
from seglog.errors import (
    GroupMaxSizeReachedError,
    InvalidRequestError,
    SeglogError,
    UnknownMemberIdError,
)

from ..cluster.group_configs import GroupConfig

LEAVE_EPOCH = -1
JOIN_EPOCH = 0
EMPTY, STABLE = "Empty", "Stable"
ASSIGNOR = "simple"
MAX_MEMBER_ID_BYTES = 255  # a member id a client generated (a UUID's 22 characters in Kafka)
MAX_SUBSCRIBED_TOPICS = 10_000
logger = logging.getLogger(__name__)


class GroupLog(Protocol):
    """Where a share group's records are written on change and read back
    (share_group_log.ShareGroupLog, which imports this module's types)."""

    def image(self, group: ShareGroup | None) -> Any: ...
    def write(self, before: Any, group: ShareGroup) -> None: ...
    def load(self, group_id: str, session_timeout_s: float, now: float) -> ShareGroup | None: ...


Assignment = dict[str, tuple[int, ...]]  # topic name -> partitions


@dataclass(frozen=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topics: tuple[str, ...] | None  # None: unchanged since the last heartbeat
    client_id: str
    client_host: str


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None  # None: unchanged


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    epoch: int = 0
    previous_epoch: int = -1
    assignment: Assignment = field(default_factory=dict)  # its current one, at `epoch`
    target: Assignment = field(default_factory=dict)  # the group's last assignment for it
    told_epoch: int = -1  # the epoch whose assignment the member was last answered
    deadline: float = 0.0


@dataclass
class ShareGroup:
    group_id: str
    members: dict[str, ShareMember] = field(default_factory=dict)
    epoch: int = 0
    assignment_epoch: int = 0
    partitions_seen: tuple[tuple[str, int], ...] = ()
    # (topic, partition) ever assigned: their share state exists (Kafka's
    # ShareGroupStatePartitionMetadata InitializedTopics)
    state_partitions: frozenset[tuple[str, int]] = frozenset()

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY


def simple_assign(
    members: Sequence[ShareMember], partitions_of: Callable[[str], int]
) -> dict[str, Assignment]:
    """Kafka's simple assignor over the members' subscriptions (see the module's note)."""
    out: dict[str, Assignment] = {m.member_id: {} for m in members}
    topics = sorted({t for m in members for t in m.subscribed})
    for topic in topics:
        subscribers = sorted(m.member_id for m in members if topic in m.subscribed)
        count = partitions_of(topic)
        if not subscribers or count <= 0:
            continue
        owners: dict[str, list[int]] = {m: [] for m in subscribers}
        if len(subscribers) >= count:
            for i, member in enumerate(subscribers):
                owners[member].append(i % count)
        else:
            for partition in range(count):
                owners[subscribers[partition % len(subscribers)]].append(partition)
        for member, partitions in owners.items():
            if partitions:
                out[member][topic] = tuple(sorted(partitions))
    return out


class ShareMembership:
    def __init__(
        self,
        partitions_of: Callable[[str], int],
        on_member_gone: Callable[[str, str], None],
        *,
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        max_size: int,
        clock: Callable[[], float] = time.monotonic,
        group_config: Callable[[str], GroupConfig] | None = None,
        log: GroupLog | None = None,
    ) -> None:
        """`partitions_of(topic)`: its partition count (0: no such topic);
        `on_member_gone(group, member)`: the member left or timed out (its records go);
        `group_config(group)`: its configs in force, whose share.heartbeat.interval.ms and
        share.session.timeout.ms override the two above (a look-up by the group's id);
        `log`: where groups' records are written on change and read back on first use
        (share_group_log.py; None: kept in memory only)."""
        self.group_config = group_config
        self.log = log
        self.partitions_of = partitions_of
        self.on_member_gone = on_member_gone
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_s = session_timeout_ms / 1000
        self.max_size = max_size
        self.clock = clock
        self.lock = threading.Lock()
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(self, beat: ShareHeartbeat) -> HeartbeatAnswer:
        if not beat.member_id or len(beat.member_id.encode()) > MAX_MEMBER_ID_BYTES:
            raise InvalidRequestError("a share group member id is 1..255 bytes, made by the client")
        if (
            beat.subscribed_topics is not None
            and len(beat.subscribed_topics) > MAX_SUBSCRIBED_TOPICS
        ):
            raise InvalidRequestError(f"more than {MAX_SUBSCRIBED_TOPICS} subscribed topics")
        gone: list[str] = []
        try:
            with self.lock:
                return self._heartbeat(beat, gone)
        finally:
            for member_id in gone:
                self.on_member_gone(beat.group_id, member_id)

    def _heartbeat(self, beat: ShareHeartbeat, gone: list[str]) -> HeartbeatAnswer:
        group = self._loaded(beat.group_id)
        if self.log is None:
            return self._beat(group, beat, gone)
        # The records are written under the lock, before the member is answered, as Kafka's
        # coordinator answers once its records are committed; a failed write puts the group
        # back as it was, so memory never runs ahead of the log.
        saved = copy.deepcopy(group)
        before = self.log.image(group)
        try:
            answer = self._beat(group, beat, gone)
            after = self.groups.get(beat.group_id)
            if after is not None:
                self.log.write(before, after)
        except BaseException:
            gone.clear()
            if saved is None:
                self.groups.pop(beat.group_id, None)
            else:
                self.groups[beat.group_id] = saved
            raise
        return answer

    def _loaded(self, group_id: str) -> ShareGroup | None:
        """The group held here, or read back from its records (a coordinator taking over)."""
        group = self.groups.get(group_id)
        if group is None and self.log is not None:
            group = self.log.load(group_id, self.session_timeout_s, self.clock())
            if group is not None:
                topics = sorted({t for m in group.members.values() for t in m.subscribed})
                group.partitions_seen = tuple((t, self.partitions_of(t)) for t in topics)
                self.groups[group_id] = group
        return group

    def _beat(
        self, group: ShareGroup | None, beat: ShareHeartbeat, gone: list[str]
    ) -> HeartbeatAnswer:
        now = self.clock()
        if group is not None:
            gone.extend(self._expire(group, now))
        if beat.member_epoch == LEAVE_EPOCH:
            if group is not None and group.members.pop(beat.member_id, None) is not None:
                gone.append(beat.member_id)
                self._reassign(group)
            return HeartbeatAnswer(beat.member_id, LEAVE_EPOCH, 0, None)
        if group is None:
            group = self.groups.setdefault(beat.group_id, ShareGroup(beat.group_id))
        member = group.members.get(beat.member_id)
        if beat.member_epoch == JOIN_EPOCH:
            if beat.subscribed_topics is None and member is None:
                raise InvalidRequestError("a joining member names the topics it subscribes to")
            if member is None:
                if len(group.members) >= self.max_size:
                    raise GroupMaxSizeReachedError(
                        f"share group {beat.group_id!r} has {self.max_size} members already"
                    )
                member = ShareMember(
                    beat.member_id, beat.client_id, beat.client_host, beat.rack_id, ()
                )
                group.members[beat.member_id] = member
            member.told_epoch = -1  # a member joining again is told its assignment
        elif member is None:
            raise UnknownMemberIdError(
                f"member {beat.member_id!r} is not in share group {beat.group_id!r}"
            )
        elif beat.member_epoch not in (member.epoch, member.previous_epoch):
            raise FencedMemberEpochError(
                f"member {beat.member_id!r} is at epoch {member.epoch}, not {beat.member_epoch}"
            )
        interval_ms, session_s = self._timing(beat.group_id)
        member.deadline = now + session_s
        if beat.rack_id is not None:
            member.rack_id = beat.rack_id
        changed = False
        if (
            beat.subscribed_topics is not None
            and tuple(sorted(beat.subscribed_topics)) != member.subscribed
        ):
            member.subscribed = tuple(sorted(set(beat.subscribed_topics)))
            changed = True
        if changed or self._partitions_changed(group) or member.epoch == 0:
            self._reassign(group)
        if member.epoch != group.assignment_epoch:
            # Reconciled in its own heartbeat only, as Kafka's share groups: a member's epoch
            # never moves while it is not looking, so one that missed several reassignments
            # (members joining one after another) is not fenced for it.
            member.assignment = member.target
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        assignment: Assignment | None = None
        if member.told_epoch != member.epoch:
            assignment = member.assignment
            member.told_epoch = member.epoch
        return HeartbeatAnswer(member.member_id, member.epoch, interval_ms, assignment)

    def _timing(self, group_id: str) -> tuple[int, float]:
        """The group's heartbeat interval (ms) and session timeout (s)."""
        if self.group_config is None:
            return self.heartbeat_interval_ms, self.session_timeout_s
        own = self.group_config(group_id)
        return own.share_heartbeat_interval_ms, own.share_session_timeout_ms / 1000

    def _partitions_changed(self, group: ShareGroup) -> bool:
        topics = sorted({t for m in group.members.values() for t in m.subscribed})
        seen = tuple((t, self.partitions_of(t)) for t in topics)
        return seen != group.partitions_seen

    def _reassign(self, group: ShareGroup) -> None:
        group.epoch += 1
        topics = sorted({t for m in group.members.values() for t in m.subscribed})
        group.partitions_seen = tuple((t, self.partitions_of(t)) for t in topics)
        target = simple_assign(list(group.members.values()), self.partitions_of)
        for member in group.members.values():
            member.target = target.get(member.member_id, {})
        group.assignment_epoch = group.epoch
        group.state_partitions = group.state_partitions | {
            (topic, p)
            for member in group.members.values()
            for topic, partitions in member.target.items()
            for p in partitions
        }

    def _expire(self, group: ShareGroup, now: float) -> list[str]:
        lapsed = [m.member_id for m in group.members.values() if m.deadline <= now]
        for member_id in lapsed:
            del group.members[member_id]
        if lapsed:
            self._reassign(group)
        return lapsed

    def expire_all(self) -> None:
        """Drop every member whose session lapsed, in every group (a periodic sweep)."""
        gone: list[tuple[str, str]] = []
        with self.lock:
            now = self.clock()
            for group_id, group in list(self.groups.items()):
                if not any(m.deadline <= now for m in group.members.values()):
                    continue  # the common case: nothing copied, nothing written
                saved = copy.deepcopy(group) if self.log is not None else None
                before = self.log.image(group) if self.log is not None else None
                lapsed = self._expire(group, now)
                if self.log is not None and before is not None:
                    try:
                        self.log.write(before, group)
                    except SeglogError as exc:  # put back: the next sweep tries again
                        logger.warning(
                            "share group %s: writing its records failed: %s", group_id, exc
                        )
                        self.groups[group_id] = saved  # type: ignore[assignment]
                        continue
                gone.extend((group_id, m) for m in lapsed)
        for group_id, member_id in gone:
            self.on_member_gone(group_id, member_id)

    def forget_groups(self, belongs: Callable[[str], bool]) -> None:
        """Drop the groups whose coordination moved away (read back if it comes back)."""
        with self.lock:
            for group_id in [g for g in self.groups if belongs(g)]:
                del self.groups[group_id]

    def is_member(self, group_id: str, member_id: str) -> bool:
        with self.lock:
            group = self.groups.get(group_id)
            return group is not None and member_id in group.members

    def group(self, group_id: str) -> ShareGroup | None:
        with self.lock:
            return self._loaded(group_id)

    def loaded(self, group_id: str) -> ShareGroup | None:  # under self.lock
        return self._loaded(group_id)
