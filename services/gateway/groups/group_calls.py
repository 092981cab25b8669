"""The groups' offset and admin calls as the broker core does them, typed, for any caller:
committing and fetching a group's offsets, looking a group up, deleting groups and offsets.
The GroupCoordinator gRPC service (group_service.py) is an adapter over `GroupCalls`; the
Kafka listener's DescribeGroups looks groups up through it too (kafka/group_admin_apis.py).

Each call goes through the groups core's order (groups_core.py `on_coordinator`: the caller's
right on the group, a valid group id, this gateway coordinating it), raising SeglogError
(the refusal, NotCoordinatorError naming the coordinating gateway, or the group's own error).
Where the gRPC API refuses a request whole — a commit naming a topic the caller may not
Read, a deletion naming a group it may not Delete — that is checked before anything is done,
as its contract says; Kafka's adapters answer such refusals per topic or per group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from seglog.errors import GroupSubscribedToTopicError, SeglogError

from ..broker.caller import Caller
from .coordinator import check_group_id
from .group_state import Group, OffsetToCommit
from .groups_core import GroupsCore
from .offsets_formats import CommittedOffset


@dataclass(frozen=True)
class OffsetCommit:
    """A member's (or, with generation -1, a consumer's own) offsets for one group."""

    group_id: str
    member_id: str
    generation_id: int
    offsets: Sequence[OffsetToCommit]
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupLookup:
    """A group as its coordinator knows it: its members' state, or None when it has none
    (then `has_offsets` says whether it is known by its committed offsets alone)."""

    group_id: str
    group: Group | None
    has_offsets: bool


class GroupCalls:
    def __init__(self, groups: GroupsCore) -> None:
        self.groups = groups
        self.coordinator = groups.coordinator
        self.offsets = groups.offsets
        self.authorization = groups.authorization

    def commit(self, caller: Caller, commit: OffsetCommit) -> list[SeglogError | None]:
        """Each entry's outcome, in order (None: committed), once the member may commit (Read
        on the group and on every topic named: refused whole otherwise)."""
        topics = sorted({c.topic for c in commit.offsets})
        self.authorization.check(caller, [("Read", "topic", t) for t in topics], "CommitOffsets")

        def work() -> list[SeglogError | None]:
            consumer_groups = self.groups.consumer_groups
            if consumer_groups is not None and consumer_groups.is_consumer_group(commit.group_id):
                # A KIP-848 group's member commits at its member epoch (the gRPC API is as
                # new as OffsetCommit v9, so its version check passes).
                partitions = [(c.topic, c.partition) for c in commit.offsets]
                consumer_groups.check_commit(
                    commit.group_id, commit.member_id, commit.generation_id, 9, partitions
                )
            else:
                self.coordinator.check_commit(
                    commit.group_id,
                    commit.member_id,
                    commit.generation_id,
                    commit.group_instance_id,
                )
            return self.groups.commit_offsets(commit.group_id, list(commit.offsets))

        return self.groups.on_coordinator(caller, "CommitOffsets", commit.group_id, work)

    def committed(self, caller: Caller, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        """The group's committed offsets, by (topic, partition)."""
        return self.fetch_offsets(caller, group_id)[0]

    def fetch_offsets(
        self, caller: Caller, group_id: str
    ) -> tuple[dict[tuple[str, int], CommittedOffset], set[tuple[str, int]]]:
        """The group's committed offsets, and its partitions with transactional offsets
        pending."""
        return self.groups.on_coordinator(
            caller, "FetchOffsets", group_id, lambda: self.groups.fetch_offsets(group_id)
        )

    def look_up(self, caller: Caller, group_id: str) -> GroupLookup:
        """The group's state (Describe on it)."""

        def work() -> GroupLookup:
            group = self.coordinator.snapshot(group_id)
            known = group is not None or bool(self.offsets.committed(group_id))
            return GroupLookup(group_id, group, known)

        return self.groups.on_coordinator(caller, "DescribeGroups", group_id, work)

    def delete_groups(self, caller: Caller, group_ids: Sequence[str]) -> list[SeglogError | None]:
        """Each group and its committed offsets deleted, or its error, in order, once the
        caller may Delete every one of them (refused whole otherwise)."""
        self.authorization.check(
            caller, [("Delete", "group", g) for g in group_ids], "DeleteGroups"
        )
        outcomes: list[SeglogError | None] = []
        for group_id in group_ids:
            try:
                self.groups.delete_group(caller, group_id)
                outcomes.append(None)
            except SeglogError as exc:
                outcomes.append(exc)
        return outcomes

    def delete_offsets(
        self, caller: Caller, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> int:
        """The group's committed offsets of these partitions deleted (none while a member
        reads one of their topics: GroupSubscribedToTopicError); returns how many were."""

        def work() -> int:
            check_group_id(group_id)
            read = self.coordinator.subscribed_topics(group_id)
            busy = sorted({topic for topic, _ in partitions} & read)
            if busy:
                raise GroupSubscribedToTopicError(
                    f"members of group {group_id} read {', '.join(busy)}: their "
                    f"offsets cannot be deleted while they do"
                )
            return self.offsets.delete_offsets(group_id, list(partitions))

        return self.groups.on_coordinator(caller, "DeleteOffsets", group_id, work)
