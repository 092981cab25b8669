"""A consumer group to and from its records in `__consumer_offsets` (formats:
consumer_group_records.py): the records a change needs (what differs between the group before
and after it, in Kafka's order) and the group rebuilt from the newest record per key, as a
coordinator taking over the partition replays them (Kafka's GroupCoordinatorShard.replay).

After a replay the members are the ones with a member-metadata record, at the epochs and
with the assignments their current-assignment records hold; their sessions start again at
the load, so members that keep heartbeating go on where they were, without joining again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from . import consumer_group_records as records
from .consumer_group_state import ClassicMetadata, ConsumerGroup, ConsumerMember, flat

logger = logging.getLogger(__name__)


def diff_records(before: ConsumerGroup, after: ConsumerGroup) -> list[records.Record]:
    group_id = after.group_id
    out: list[records.Record] = []
    for member_id in before.members:
        if member_id not in after.members:
            out.append(records.current_assignment(group_id, member_id, None))
            out.append(records.target_member(group_id, member_id, None))
            out.append(records.member_metadata(group_id, member_id, None))
    for member_id, member in after.members.items():
        old = before.members.get(member_id)
        if old is None or old.metadata_key() != member.metadata_key():
            out.append(records.member_metadata(group_id, member_id, member))
    if after.epoch != before.epoch:
        out.append(records.group_epoch(group_id, after.epoch))
    target_changed = False
    for member_id, target in after.target.items():
        if member_id in after.members and flat(before.target.get(member_id, {})) != flat(target):
            out.append(records.target_member(group_id, member_id, target))
            target_changed = True
    if target_changed or after.assignment_epoch != before.assignment_epoch:
        out.append(records.assignment_epoch(group_id, after.assignment_epoch))
    for member_id, member in after.members.items():
        old = before.members.get(member_id)
        if old is None or old.assignment_key() != member.assignment_key():
            out.append(records.current_assignment(group_id, member_id, member))
    return out


def replay(group_id: str, stored: Mapping[bytes, bytes], now: float) -> ConsumerGroup | None:
    """The group its records describe; None when they hold no group epoch (deleted)."""
    group = ConsumerGroup(group_id)
    found = False
    targets: dict[str, dict[str, frozenset[int]]] = {}
    assignments: dict[str, object] = {}
    for key, value in stored.items():
        try:
            kind = records.record_type(key)
            if kind not in records.VALUE_CLASSES:
                continue  # partition metadata (4), regular expressions (16): not needed
            decoded_key = records.decode_key(key)
            decoded = records.decode_value(key, value)
        except (ValueError, KeyError, IndexError) as exc:
            logger.error("group %s: skipping a record that does not decode: %s", group_id, exc)
            continue
        if kind == records.GROUP_METADATA:
            group.epoch, found = decoded.epoch, True
        elif kind == records.TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = decoded.assignment_epoch
        elif kind == records.MEMBER_METADATA:
            group.members[decoded_key.member_id] = ConsumerMember(
                decoded_key.member_id,
                client_id=decoded.client_id,
                client_host=decoded.client_host,
                instance_id=decoded.instance_id,
                rack_id=decoded.rack_id,
                topics=tuple(decoded.subscribed_topic_names),
                regex=decoded.subscribed_topic_regex,
                server_assignor=decoded.server_assignor,
                rebalance_timeout_ms=decoded.rebalance_timeout_ms,
                last_heartbeat=now,
                classic=_classic(decoded.classic_member_metadata),
            )
        elif kind == records.TARGET_ASSIGNMENT_MEMBER:
            targets[decoded_key.member_id] = records.partitions_of(decoded.topic_partitions)
        elif kind == records.CURRENT_MEMBER_ASSIGNMENT:
            assignments[decoded_key.member_id] = decoded
    if not found:
        return None
    for member_id, member in group.members.items():
        current = assignments.get(member_id)
        if current is not None:
            member.member_epoch = current.member_epoch  # type: ignore[attr-defined]
            member.previous_member_epoch = current.previous_member_epoch  # type: ignore[attr-defined]
            member.state = current.state  # type: ignore[attr-defined]
            member.assigned = records.partitions_of(current.assigned_partitions)  # type: ignore[attr-defined]
            member.assignment_epochs = records.assignment_epochs_of(
                current.assigned_partitions,  # type: ignore[attr-defined]
                member.member_epoch,
            )
            member.pending_revocation = records.partitions_of(
                current.partitions_pending_revocation  # type: ignore[attr-defined]
            )
            if member.pending_revocation:
                member.revoke_deadline = now + member.rebalance_timeout_ms / 1000
        group.target[member_id] = targets.get(member_id, {})
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member_id
    logger.info(
        "group %s: replayed epoch %d with %d members", group_id, group.epoch, len(group.members)
    )
    return group


def _classic(stored: Any) -> ClassicMetadata | None:
    if stored is None:
        return None
    return ClassicMetadata(
        stored.session_timeout_ms,
        tuple((p.name, bytes(p.metadata)) for p in stored.supported_protocols),
    )
