"""The checks of a ConsumerGroupHeartbeat before the coordinator acts on it, as Kafka's
GroupMetadataManager makes them: the request itself (throwIfConsumerGroupHeartbeatRequest-
IsInvalid), the member's epoch (throwIfMemberEpochIsInvalid), a commit's epoch, and the
subscription fields a heartbeat carries (null: unchanged). Regular expressions are RE2's
(google-re2), the syntax and linear-time matching of the RE2/J Kafka uses; they match a
whole topic name (RE2/J's matches()). Differences from RE2/J: none known for the syntax
Kafka documents; Java-only escapes RE2/J rejects are rejected here too."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import re2

from seglog.coordinator_errors import (
    FencedMemberEpochError,
    InvalidRegularExpressionError,
    StaleMemberEpochError,
)
from seglog.errors import (
    IllegalGenerationError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)

from .consumer_group_state import STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerMember, flat
from .server_assignors import check_assignor

# A stranger's regular expression is bounded before RE2 compiles it (RE2 is linear-time in
# the matched text; its program size is bounded by RE2's own max_mem).
REGEX_MAX_CHARS = 4096


@dataclass(frozen=True)
class ConsumerHeartbeat:
    """One ConsumerGroupHeartbeat, typed; None fields did not change since the last one."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topics: tuple[str, ...] | None = None
    regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[str, frozenset[int]] | None = None  # topic id -> partitions
    client_id: str = ""
    client_host: str = ""
    # Whether the member's principal may Describe a topic: its regex resolves only to those
    # (Kafka 4's coordinator filters regex matches through the authorizer). None: no filter.
    topic_describable: Callable[[str], bool] | None = None


def check_request(hb: ConsumerHeartbeat) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
    if not hb.group_id:
        raise InvalidRequestError("GroupId can't be empty.")
    if hb.instance_id is not None and not hb.instance_id:
        raise InvalidRequestError("InstanceId can't be empty.")
    if hb.rack_id is not None and not hb.rack_id:
        raise InvalidRequestError("RackId can't be empty.")
    check_assignor(hb.server_assignor)
    if hb.member_epoch == 0:
        if hb.rebalance_timeout_ms == -1:
            raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
        if hb.owned is None or any(hb.owned.values()):
            raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
        if hb.topics is None and hb.regex is None:
            raise InvalidRequestError(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif hb.member_epoch == STATIC_LEAVE_EPOCH and hb.instance_id is None:
        raise InvalidRequestError(
            "InstanceId can't be null when a static member leaves (MemberEpoch -2)."
        )
    elif not hb.member_id:
        raise InvalidRequestError("MemberId can't be empty.")
    if hb.regex is not None:
        compile_regex(hb.regex)


def compile_regex(regex: str) -> re2._Regexp:
    if len(regex) > REGEX_MAX_CHARS:
        raise InvalidRegularExpressionError(
            f"SubscribedTopicRegex is {len(regex)} characters, over {REGEX_MAX_CHARS}"
        )
    try:
        return re2.compile(regex)
    except re2.error as exc:
        raise InvalidRegularExpressionError(f"SubscribedTopicRegex {regex!r}: {exc}") from None


def fence(member: ConsumerMember, hb: ConsumerHeartbeat) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: a member ahead of the coordinator, or behind it
    other than by one lost answer (its previous epoch, owning nothing outside its
    assignment), is fenced and must join again."""
    if hb.member_epoch > member.member_epoch:
        raise FencedMemberEpochError(
            f"member epoch {hb.member_epoch} is ahead of the coordinator's {member.member_epoch}"
        )
    if hb.member_epoch < member.member_epoch:
        owned = hb.owned
        if (
            hb.member_epoch != member.previous_member_epoch
            or owned is None
            or not flat(owned) <= flat(member.assigned)
        ):
            raise FencedMemberEpochError(
                f"member epoch {hb.member_epoch} is behind the coordinator's {member.member_epoch}"
            )


def check_epoch(member: ConsumerMember, epoch: int) -> None:
    """Kafka's validateMemberEpoch: a classic member's generation is its member epoch."""
    if epoch != member.member_epoch and member.classic is not None:
        raise IllegalGenerationError(
            f"generation {epoch} is not member {member.member_id}'s epoch {member.member_epoch}"
        )
    if epoch != member.member_epoch:
        raise StaleMemberEpochError(
            f"member epoch {epoch} is not member {member.member_id}'s current {member.member_epoch}"
        )


def update_subscription(member: ConsumerMember, hb: ConsumerHeartbeat) -> bool:
    """Take the heartbeat's non-null fields; True when the subscription changed."""
    before = (member.topics, member.regex, member.server_assignor)
    if hb.instance_id is not None:
        member.instance_id = hb.instance_id
    if hb.rack_id is not None:
        member.rack_id = hb.rack_id
    if hb.rebalance_timeout_ms != -1:
        member.rebalance_timeout_ms = hb.rebalance_timeout_ms
    if hb.topics is not None:
        member.topics = tuple(sorted(set(hb.topics)))
    if hb.regex is not None:
        member.regex = hb.regex or None
    if hb.server_assignor is not None:
        member.server_assignor = hb.server_assignor
    if hb.client_id:
        member.client_id = hb.client_id
    if hb.client_host:
        member.client_host = hb.client_host
    return (member.topics, member.regex, member.server_assignor) != before


def check_commit_epoch(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    api_version: int,
    partitions: Sequence[tuple[str, int]],
    topic_ids: Mapping[str, str],
) -> None:
    """Kafka's ConsumerGroup.validateOffsetCommit: -1 commits only while the group is
    empty; a member commits with OffsetCommit v9+ at its current epoch or, as Kafka 4.3
    takes it (AssignmentEpochs), at an earlier one for partitions it has held since then (a
    commit sent before the heartbeat answer that moved its epoch arrived). `topic_ids`: the
    id of each topic named in `partitions`."""
    if epoch < 0 and not group.members:
        return
    member = _member(group, member_id)
    if member.classic is not None:  # Kafka checks its generation, any version
        return check_epoch(member, epoch)
    if api_version < 9:
        raise UnsupportedVersionError(
            "OffsetCommit version 9 or above must be used by members using the "
            "consumer group protocol"
        )
    if epoch < member.member_epoch and partitions and epoch >= 0:
        held = member.assignment_epochs
        if all(held.get((topic_ids[n], p), epoch + 1) <= epoch for n, p in partitions):
            return
    check_epoch(member, epoch)


def check_fetch_epoch(group: ConsumerGroup, member_id: str, epoch: int) -> None:
    """OffsetFetch v9+ naming a member of a KIP-848 group: it must be in the group at that
    epoch."""
    check_epoch(_member(group, member_id), epoch)


def _member(group: ConsumerGroup, member_id: str) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberIdError(f"member {member_id} is not in group {group.group_id}")
    return member
