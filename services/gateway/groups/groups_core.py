"""The core's groups: which gateway coordinates a group, the groups this one lists, offsets
committed after their checks, and the group calls for a caller: whether the caller may,
whether this gateway coordinates the group, then the work, in that order for every group API
(the typed calls of membership.py and group_calls.py, and the Kafka listener's group
adapters; the GroupCoordinator gRPC service, group_service.py, is an adapter over them).

Kafka's rules: Read on the group to join, sync, heartbeat, leave and commit; Describe on it
to find its coordinator, describe it and fetch its offsets; Delete on it to delete it or its
offsets; Describe on the cluster to list every group (else only the groups the caller may
Describe).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from seglog.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InvalidGroupIdError,
    InvalidOffsetError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    PermissionDeniedError,
    SeglogError,
    UnknownTopicOrPartitionError,
)

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from ..cluster.group_configs import GroupConfigs
from ..cluster.registry import Registry
from ..coordination.group_coordinators import EtcdCoordination, SoleCoordinator
from .consumer_groups import ConsumerGroups
from .coordinator import GroupCoordinator, check_group_id
from .group_state import Group, OffsetToCommit
from .offsets_contents import GroupOffsets
from .offsets_store import OffsetsStore
from .txn_offsets import TransactionalOffsets

T = TypeVar("T")

# The operation on the group each API needs (Kafka's authorizer calls).
GROUP_OPERATIONS = {
    "JoinGroup": "Read",
    "SyncGroup": "Read",
    "Heartbeat": "Read",
    "LeaveGroup": "Read",
    "CommitOffsets": "Read",
    "FindCoordinator": "Describe",
    "DescribeGroups": "Describe",
    "FetchOffsets": "Describe",
    "DeleteGroups": "Delete",
    "DeleteOffsets": "Delete",
    "ConsumerGroupHeartbeat": "Read",
    "ConsumerGroupDescribe": "Describe",
}
# Kafka's group coordinator takes an empty group id only where old clients committed offsets
# without a group (OffsetCommit, OffsetFetch); the other group APIs answer INVALID_GROUP_ID
# for it (its isValidGroupId), before asking whether the group is coordinated here.
EMPTY_GROUP_ID_ALLOWED = frozenset({"CommitOffsets", "FetchOffsets"})
# Kafka's offset.metadata.max.bytes.
OFFSET_METADATA_MAX_BYTES = 4096


class GroupsCore:
    def __init__(
        self,
        registry: Registry,
        coordinator: GroupCoordinator,
        offsets: OffsetsStore,
        authorization: Authorization,
        *,
        offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES,
        coordination: EtcdCoordination | SoleCoordinator | None = None,
        group_configs: GroupConfigs,
    ) -> None:
        self.registry = registry
        # Each group's dynamic configs (Kafka's GroupConfigManager, which its group
        # coordinator holds): what the config APIs on a GROUP resource read and alter.
        self.group_configs = group_configs
        self.coordinator = coordinator
        self.offsets = offsets
        self.authorization = authorization
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.coordination = coordination or SoleCoordinator()
        # KIP-848 groups (consumer_groups.py), beside the classic coordinator's: a group id
        # is of one kind at a time.
        self.consumer_groups: ConsumerGroups | None = None
        # True on the gateway that lists the groups of unclaimed partitions (the controller).
        self.lists_unclaimed: Callable[[], bool] = lambda: True
        if isinstance(self.coordination, EtcdCoordination):
            self.coordination.gained.append(offsets.forget_partition)
            self.coordination.lost.append(self._lost)
        # TxnOffsetCommit's pending offsets (txn_offsets.py).
        self.transactional = TransactionalOffsets(
            offsets,
            coordinator,
            authorization,
            self.on_coordinator,
            self._check_commit_entry,
            lambda: self.consumer_groups,
        )

    # -- which gateway coordinates, what it lists, what it commits -----------------------------

    def _lost(self, partition: int) -> None:
        self.offsets.forget_partition(partition)
        self.coordinator.forget_groups(lambda g: self.offsets.partition_for(g) == partition)
        if self.consumer_groups is not None:
            self.consumer_groups.forget_groups(lambda g: self.offsets.partition_for(g) == partition)

    def not_coordinated_here(self, group_id: str) -> SeglogError | None:
        if isinstance(self.coordination, SoleCoordinator):
            return None
        try:
            owner = self.coordination.coordinator_of(self.offsets.partition_for(group_id))
        except SeglogError as exc:
            return CoordinatorNotAvailableError(f"no coordinator for group {group_id!r}: {exc}")
        if owner == self.coordination.address:
            return None
        if not owner:
            return CoordinatorNotAvailableError(f"no gateway coordinates group {group_id!r} yet")
        return NotCoordinatorError(
            f"group {group_id!r} is coordinated by the gateway at {owner}", coordinator=owner
        )

    def commit_offsets(
        self, group_id: str, offsets: Sequence[OffsetToCommit]
    ) -> list[SeglogError | None]:
        """Store the offsets that are valid (the caller checked the committer): for each
        entry, in order, its error or None (Kafka's OffsetCommit and the gRPC one alike)."""
        problems = [self._check_commit_entry(commit) for commit in offsets]
        valid = [
            (c.topic, c.partition, c.offset, c.leader_epoch, c.metadata)
            for c, problem in zip(offsets, problems, strict=True)
            if problem is None
        ]
        try:
            self.offsets.commit(group_id, valid)
        except SeglogError as exc:
            problems = [exc if problem is None else problem for problem in problems]
        return problems

    def complete_transactional_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> None:
        """The transaction coordinator's call once a COMMIT (`committed`) or ABORT marker of
        the producer is written to the group's `__consumer_offsets` partition: its pending
        offsets there become committed, or are dropped (txn_offsets.py). No I/O, raises
        nothing: a group this gateway does not hold is settled by its coordinator, which
        reads the marker from the log."""
        self.transactional.complete(group_id, producer_id, producer_epoch, committed)

    def fetch_offsets(self, group_id: str) -> tuple[GroupOffsets, set[tuple[str, int]]]:
        """The group's committed offsets, and its partitions with transactional offsets
        still pending (markers others wrote applied first)."""
        unstable = self.transactional.settled(group_id)
        return self.offsets.committed(group_id), unstable

    def _check_commit_entry(self, commit: OffsetToCommit) -> SeglogError | None:
        topic = self.registry.topics.get(commit.topic)
        if topic is None or not 0 <= commit.partition < len(topic.partitions):
            return UnknownTopicOrPartitionError(f"{commit.topic}-{commit.partition} does not exist")
        if commit.offset < 0:
            return InvalidOffsetError(
                f"{commit.topic}-{commit.partition}: committed offset {commit.offset} is negative"
            )
        size = len(commit.metadata.encode())
        if size > self.offset_metadata_max_bytes:
            return OffsetMetadataTooLargeError(
                f"{commit.topic}-{commit.partition}: metadata is {size} bytes, over "
                f"offset.metadata.max.bytes {self.offset_metadata_max_bytes}"
            )
        return None

    def group_listing(self) -> list[tuple[str, Group | None]]:
        """The groups this gateway lists, by id, each with its state (None: known only by
        its committed offsets)."""
        group_ids = set(self.coordinator.group_ids())
        if self.consumer_groups is not None:
            group_ids |= {g.group_id for g in self.consumer_groups.snapshots()}
        try:
            group_ids |= self.offsets.group_ids(self._partitions_coordinated_here())
        except SeglogError:
            pass  # groups known only by their offsets show up once those can be read
        return [(group_id, self.coordinator.snapshot(group_id)) for group_id in sorted(group_ids)]

    def _partitions_coordinated_here(self) -> list[int] | None:
        """With several gateways, each lists the groups it coordinates, and the controller
        also those of partitions no gateway holds (read, not claimed: groups with offsets
        and no members); the admin client asks them all."""
        coordination = self.coordination
        if isinstance(coordination, SoleCoordinator):
            return None
        listed = []
        for partition in range(self.offsets.num_partitions):
            owner = coordination.owner(partition)
            if owner == coordination.address or (not owner and self.lists_unclaimed()):
                listed.append(partition)
        return listed

    def _check(self, caller: Caller, api: str, group_id: str) -> None:
        operation = GROUP_OPERATIONS[api]
        self.authorization.check(caller, [(operation, "group", group_id)], api)

    def on_coordinator(self, caller: Caller, api: str, group_id: str, work: Callable[[], T]) -> T:
        """`work`'s answer, once the caller may call `api` on the group and this gateway
        coordinates it; raises PermissionDeniedError, InvalidGroupIdError or the
        coordinator's error (NotCoordinatorError naming the coordinator) instead."""
        self._check(caller, api, group_id)
        if not group_id and api not in EMPTY_GROUP_ID_ALLOWED:
            raise InvalidGroupIdError(f"{api}: the group id is empty")
        problem = self.not_coordinated_here(group_id)
        if problem is not None:
            raise problem
        return work()

    def coordinator_address(self, caller: Caller, group_id: str) -> str:
        """The gRPC address of the gateway coordinating the group, "" for this one."""
        self._check(caller, "FindCoordinator", group_id)
        problem = self.not_coordinated_here(group_id)
        if isinstance(problem, NotCoordinatorError):
            return str(problem.coordinator)
        if problem is not None:
            raise problem
        return ""

    def listing(self, caller: Caller) -> list[tuple[str, Group | None]]:
        """The groups this gateway lists (group_service.py), each with its state when it
        has members: all of them with Describe on the cluster, else those the caller may
        Describe."""
        listing = self.group_listing()
        try:
            self.authorization.check(caller, [("Describe", *CLUSTER)], "ListGroups")
        except PermissionDeniedError:
            return [
                (group_id, group)
                for group_id, group in listing
                if self.authorization.allows(caller, "Describe", "group", group_id)
            ]
        return listing

    def delete_group(self, caller: Caller, group_id: str) -> None:
        """The group and its committed offsets deleted (GroupNotEmptyError while it has
        members)."""

        def delete() -> None:
            check_group_id(group_id)
            self.coordinator.delete_group(group_id)
            if self.consumer_groups is not None and self.consumer_groups.delete_group(group_id):
                try:
                    self.offsets.delete_group(group_id)
                except GroupIdNotFoundError:
                    pass  # a consumer group without committed offsets
                return
            self.offsets.delete_group(group_id)

        self._check(caller, "DeleteGroups", group_id)
        problem = self.not_coordinated_here(group_id)
        if problem is not None:
            raise problem
        delete()
