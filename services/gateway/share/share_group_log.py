"""A share group to and from its records in `__consumer_offsets` (formats:
share_group_records.py): the records a change needs (what differs between the group before
and after it, in Kafka's order) and the group rebuilt from the newest record per key, as a
coordinator taking over the partition replays them (Kafka's GroupCoordinatorShard.replay).

After a replay the members are the ones with a member-metadata record, at the epochs and with
the assignments their current-assignment records hold; their sessions start again at the
load, so members that keep heartbeating go on where they were, without joining again, and
those that do not are dropped a session timeout later.

Records name topics by id, the membership by name: a topic deleted since (no name for its
id) drops out of the replayed assignment, and the next heartbeat assigns again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ..cluster.registry import Registry
from . import share_group_records as records
from .share_membership import Assignment, ShareGroup, ShareMember

logger = logging.getLogger(__name__)

Load = Callable[[str], Mapping[bytes, bytes]]  # group -> its records (key -> newest value)
Persist = Callable[[str, list[records.Record]], None]  # appended in order, acks=all


class MemberImage(NamedTuple):
    metadata: tuple[object, ...]  # what the member-metadata record holds
    epochs: tuple[int, int]  # member epoch, previous member epoch
    assignment: tuple[tuple[str, tuple[int, ...]], ...]  # sorted (topic, partitions)
    target: tuple[tuple[str, tuple[int, ...]], ...]  # the group's assignment for it, sorted


class GroupImage(NamedTuple):
    """What a share group's records hold, to compare a group before and after a change."""

    epoch: int
    assignment_epoch: int
    members: dict[str, MemberImage]
    state_partitions: frozenset[tuple[str, int]]


def image_of(group: ShareGroup | None) -> GroupImage:
    if group is None:
        return GroupImage(0, 0, {}, frozenset())
    return GroupImage(
        group.epoch,
        group.assignment_epoch,
        {
            m.member_id: MemberImage(
                (m.rack_id, m.client_id, m.client_host, m.subscribed),
                (m.epoch, m.previous_epoch),
                tuple(sorted(m.assignment.items())),
                tuple(sorted(m.target.items())),
            )
            for m in group.members.values()
        },
        group.state_partitions,
    )


class ShareGroupLog:
    def __init__(
        self,
        registry: Registry,
        load: Load,
        persist: Persist,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.registry = registry
        self._load = load
        self._persist = persist
        self._clock_ms = clock_ms

    def image(self, group: ShareGroup | None) -> GroupImage:
        return image_of(group)

    def write(self, before: GroupImage, group: ShareGroup) -> None:
        """Append the records that turn `before` into `group` (nothing when alike)."""
        out = self.diff(before, group)
        if out:
            self._persist(group.group_id, out)

    def diff(self, before: GroupImage, group: ShareGroup) -> list[records.Record]:
        after = image_of(group)
        gid = group.group_id
        out: list[records.Record] = []
        for member_id in before.members:
            if member_id not in after.members:
                out.append(records.current_assignment(gid, member_id, None, {}))
                out.append(records.target_member(gid, member_id, None))
                out.append(records.member_metadata(gid, member_id, None))
        for member_id, now in after.members.items():
            old = before.members.get(member_id)
            if old is None or old.metadata != now.metadata:
                out.append(records.member_metadata(gid, member_id, group.members[member_id]))
        if after.epoch != before.epoch:
            out.append(records.group_epoch(gid, after.epoch))
        targets_changed = False
        for member_id, now in after.members.items():
            old = before.members.get(member_id)
            if old is None or old.target != now.target:
                assigned = self._by_id(group.members[member_id].target)
                out.append(records.target_member(gid, member_id, assigned))
                targets_changed = True
        if targets_changed or after.assignment_epoch != before.assignment_epoch:
            out.append(records.assignment_epoch(gid, after.assignment_epoch, self._clock_ms()))
        for member_id, now in after.members.items():
            old = before.members.get(member_id)
            if old is None or old.epochs != now.epochs or old.assignment != now.assignment:
                assigned = self._by_id(group.members[member_id].assignment)
                out.append(records.current_assignment(gid, member_id, now.epochs, assigned))
        if after.state_partitions != before.state_partitions:
            out.append(records.state_partitions(gid, self._initialized(after.state_partitions)))
        return out

    def load(self, group_id: str, session_timeout_s: float, now: float) -> ShareGroup | None:
        """The group its records describe; None when they hold no group epoch."""
        stored = self._load(group_id)
        if not stored:
            return None
        group = ShareGroup(group_id)
        found = False
        targets: dict[str, dict[str, tuple[int, ...]]] = {}
        current: dict[str, object] = {}
        for key, value in stored.items():
            try:
                kind = records.record_type(key)
                if kind not in records.VALUE_CLASSES:
                    continue  # type 9, before 4.1: not needed
                decoded_key = records.decode_key(key)
                decoded = records.decode_value(key, value)
            except (ValueError, KeyError, IndexError) as exc:
                logger.error(
                    "share group %s: skipping a record that does not decode: %s", group_id, exc
                )
                continue
            if kind == records.GROUP_METADATA:
                group.epoch, found = decoded.epoch, True
            elif kind == records.TARGET_ASSIGNMENT_METADATA:
                group.assignment_epoch = decoded.assignment_epoch
            elif kind == records.MEMBER_METADATA:
                group.members[decoded_key.member_id] = ShareMember(
                    decoded_key.member_id,
                    decoded.client_id,
                    decoded.client_host,
                    decoded.rack_id,
                    tuple(sorted(decoded.subscribed_topic_names)),
                    deadline=now + session_timeout_s,
                )
            elif kind == records.TARGET_ASSIGNMENT_MEMBER:
                targets[decoded_key.member_id] = records.partitions_of(decoded.topic_partitions)
            elif kind == records.CURRENT_MEMBER_ASSIGNMENT:
                current[decoded_key.member_id] = decoded
            elif kind == records.STATE_PARTITION_METADATA:
                group.state_partitions = frozenset(
                    (t.topic_name, p) for t in decoded.initialized_topics for p in t.partitions
                )
        if not found:
            return None
        for member_id, member in group.members.items():
            assigned = current.get(member_id)
            if assigned is not None:
                member.epoch = assigned.member_epoch  # type: ignore[attr-defined]
                member.previous_epoch = assigned.previous_member_epoch  # type: ignore[attr-defined]
                by_id = records.partitions_of(assigned.assigned_partitions)  # type: ignore[attr-defined]
            else:
                by_id = targets.get(member_id, {})
            member.assignment = self._by_name(by_id)
            member.target = self._by_name(targets.get(member_id, by_id))
            member.told_epoch = member.epoch  # it was answered this assignment already
        logger.info(
            "share group %s: replayed epoch %d with %d members",
            group_id,
            group.epoch,
            len(group.members),
        )
        return group

    # -- topic ids (records) and names (the membership) ------------------------------------

    def _by_id(self, assignment: Assignment) -> dict[str, tuple[int, ...]]:
        image = self.registry.image
        out = {}
        for topic, partitions in assignment.items():
            topic_id = image.topic_id_of(topic)
            if topic_id:
                out[topic_id] = partitions
        return out

    def _by_name(self, by_id: Mapping[str, tuple[int, ...]]) -> Assignment:
        image = self.registry.image
        out = {}
        for topic_id, partitions in by_id.items():
            name = image.topic_name_of(topic_id)
            if name:
                out[name] = tuple(partitions)
        return out

    def _initialized(
        self, partitions: frozenset[tuple[str, int]]
    ) -> dict[str, tuple[str, tuple[int, ...]]]:
        image = self.registry.image
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        out = {}
        for topic, parts in by_topic.items():
            topic_id = image.topic_id_of(topic)
            if topic_id:
                out[topic_id] = (topic, tuple(sorted(parts)))
        return out
