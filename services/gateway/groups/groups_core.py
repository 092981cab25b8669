"""The core's group calls for a caller: whether the caller may, whether this gateway
coordinates the group, then the work, in that order for every group API (Kafka's, through
the listener's group adapters). Kafka's rules: Read on the group to join, sync, heartbeat,
leave and commit; Describe on it to find its coordinator, describe it and fetch its offsets;
Delete on it to delete it or its offsets; Describe on the cluster to list every group (else
only the groups the caller may Describe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from seglog.errors import InvalidGroupIdError, NotCoordinatorError, PermissionDeniedError

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from .coordinator import check_group_id
from .group_service import GroupCoordinatorService
from .group_state import Group

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
}
# Kafka's group coordinator takes an empty group id only where old clients committed offsets
# without a group (OffsetCommit, OffsetFetch); the other group APIs answer INVALID_GROUP_ID
# for it (its isValidGroupId), before asking whether the group is coordinated here.
EMPTY_GROUP_ID_ALLOWED = frozenset({"CommitOffsets", "FetchOffsets"})


class GroupsCore:
    def __init__(self, service: GroupCoordinatorService, authorization: Authorization) -> None:
        self.service = service
        self.coordinator = service.coordinator
        self.offsets = service.offsets
        self.authorization = authorization

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
        problem = self.service.not_coordinated_here(group_id)
        if problem is not None:
            raise problem
        return work()

    def coordinator_address(self, caller: Caller, group_id: str) -> str:
        """The gRPC address of the gateway coordinating the group, "" for this one."""
        self._check(caller, "FindCoordinator", group_id)
        problem = self.service.not_coordinated_here(group_id)
        if isinstance(problem, NotCoordinatorError):
            return str(problem.coordinator)
        if problem is not None:
            raise problem
        return ""

    def listing(self, caller: Caller) -> list[tuple[str, Group | None]]:
        """The groups this gateway lists (group_service.py), each with its state when it
        has members: all of them with Describe on the cluster, else those the caller may
        Describe."""
        listing = self.service.group_listing()
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
            self.offsets.delete_group(group_id)

        self._check(caller, "DeleteGroups", group_id)
        problem = self.service.not_coordinated_here(group_id)
        if problem is not None:
            raise problem
        delete()
