"""A consumer group's subscriptions resolved against the registry, and its target
assignment computed from them (Kafka's TargetAssignmentBuilder with the server assignors of
server_assignors.py): shared by the KIP-848 heartbeat (consumer_groups.py) and the classic
members of a consumer group (classic_members.py)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ..cluster.registry import Registry
from .consumer_group_checks import compile_regex
from .consumer_group_state import ConsumerGroup, ConsumerMember, flat, nested
from .server_assignors import AssignorMember, assign, preferred

# regex -> (the metadata image it was matched against, the names it matched): a regex is
# matched against every topic again only once the metadata changed (Kafka likewise refreshes
# its resolved regexes when its image has new topics), not at every member's heartbeat.
_RESOLVED: dict[str, tuple[weakref.ref[Any], int, frozenset[str]]] = {}
_RESOLVED_MAX = 1024  # distinct regexes remembered; past it the memory starts afresh
# How often a member's regex matches are authorized again (Kafka's coordinator refreshes a
# group's regexes at most every 10 s likewise).
REGEX_RECHECK_S = 10.0


def _resolved(registry: Registry, regex: str) -> frozenset[str]:
    image = registry.image
    known = _RESOLVED.get(regex)
    # A weak reference: an image gone (another registry's, a reloaded one) never matches.
    if known is not None and known[0]() is image and known[1] == image.offset:
        return known[2]
    pattern = compile_regex(regex)
    names = frozenset(t for t in registry.topics if pattern.fullmatch(t))
    if len(_RESOLVED) >= _RESOLVED_MAX:
        _RESOLVED.clear()
    _RESOLVED[regex] = (weakref.ref(image), image.offset, names)
    return names


def member_topics(registry: Registry, member: ConsumerMember) -> set[str]:
    """Its topics by name, and those its regular expression matches whole. Every topic, the
    internal ones too: Kafka's coordinator (refreshRegularExpressions) matches the regex
    against all the topics of its metadata image, and franz-go's Test848RegexBrokerResolves
    expects `__consumer_offsets` assigned to a regex naming it."""
    names = set(member.topics)
    if member.regex is not None:
        matched = _resolved(registry, member.regex)
        if member.regex_allowed is not None:
            # A topic matched since the member's last check waits for its next heartbeat.
            matched = matched & member.regex_allowed
        names.update(matched)
    return names


def check_regex_access(
    registry: Registry, member: ConsumerMember, describable: Callable[[str], bool], now: float
) -> None:
    """At the member's heartbeat: which of the topics its regex matches its principal may
    Describe (Kafka 4 resolves a regex through the authorizer likewise; an undescribable
    topic is never assigned through a regex). Checked again when the matches changed, and
    every REGEX_RECHECK_S (ACLs granted or removed since), not at every heartbeat."""
    if member.regex is None:
        member.regex_allowed = member.regex_checked = None
        return
    matched = _resolved(registry, member.regex)
    if (
        matched is member.regex_checked
        and member.regex_allowed is not None
        and now - member.regex_checked_at < REGEX_RECHECK_S
    ):
        return
    member.regex_allowed = frozenset(t for t in matched if describable(t))
    member.regex_checked = matched
    member.regex_checked_at = now


def subscribed_metadata(registry: Registry, group: ConsumerGroup) -> dict[str, tuple[str, int]]:
    """name -> (topic id, partitions) of every existing topic a member subscribes to."""
    names: set[str] = set()
    for member in group.members.values():
        names.update(member_topics(registry, member))
    out = {}
    for name in sorted(names):
        topic = registry.topics.get(name)
        if topic is not None and topic.topic_id:
            out[name] = (topic.topic_id, len(topic.partitions))
    return out


def bump_epoch_if_changed(registry: Registry, group: ConsumerGroup, changed: bool) -> None:
    """A member joined or changed its subscription (`changed`), or a subscribed topic did:
    a new group epoch, so a new target assignment."""
    metadata = subscribed_metadata(registry, group)
    if changed or metadata != group.topic_metadata:
        group.epoch += 1
        group.topic_metadata = metadata


def assign_targets(registry: Registry, group: ConsumerGroup) -> None:
    """The target assignment for the group epoch, if it has none yet."""
    if group.assignment_epoch >= group.epoch:
        return
    metadata = group.topic_metadata
    group.assignor = preferred([m.server_assignor for m in group.members.values()])
    specs = []
    for member in group.members.values():
        names = member_topics(registry, member)
        ids = frozenset(metadata[n][0] for n in names if n in metadata)
        previous = flat(group.target.get(member.member_id, {}))
        specs.append(AssignorMember(member.member_id, member.instance_id, ids, previous))
    counts = {topic_id: count for topic_id, count in metadata.values()}
    answer = assign(group.assignor, specs, counts)
    group.target = {member_id: nested(pairs) for member_id, pairs in answer.items()}
    group.assignment_epoch = group.epoch
