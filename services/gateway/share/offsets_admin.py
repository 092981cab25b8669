"""Kafka's share-group offsets admin (KIP-932): AlterShareGroupOffsets and
DeleteShareGroupOffsets, what `kafka-share-groups --reset-offsets ... --execute` and
`--delete-offsets` send.

Both act on a share group without members only, as Kafka's (NON_EMPTY_GROUP otherwise: a
member holding records would see its state pulled away). Altering starts each named share
partition afresh at the offset given: its in-flight records dropped and its state epoch
bumped, written to __share_group_state before the answer (partition_states.py); deleting
writes its state's tombstone, so its next use starts it by share.auto.offset.reset. Each
partition goes to the gateway holding it (partition_ops.py's router), as fetches do.

Who may: Read on the group and on each topic to alter (Kafka's checks), Delete on the group
and Read on each topic to delete; a topic refused or unknown fails its own partitions only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from seglog.errors import (
    GroupIdNotFoundError,
    InvalidRequestError,
    NonEmptyGroupError,
    PermissionDeniedError,
    SeglogError,
    UnknownTopicOrPartitionError,
)

from ..broker.caller import Caller
from .share_core import ShareGroups


class PartitionResult(NamedTuple):
    topic: str
    partition: int
    error: SeglogError | None


class ShareOffsetsAdmin:
    def __init__(self, share: ShareGroups) -> None:
        self.share = share

    def _check_group(self, caller: Caller, group_id: str, operation: str, action: str) -> None:
        self.share.authorization.check(caller, [(operation, "group", group_id)], action)
        group = self.share.membership.group(group_id)
        if group is None and self.share.consumer_group_exists(group_id):
            raise GroupIdNotFoundError(f"Group {group_id} is not a share group.")
        if group is not None and group.members:
            raise NonEmptyGroupError(f"The group {group_id} is not empty.")

    def _topic_error(self, caller: Caller, topic: str) -> SeglogError | None:
        if not self.share.authorization.allows(caller, "Read", "topic", topic):
            return PermissionDeniedError(f"{caller.principal} may not Read topic {topic!r}")
        if self.share.partitions_of(topic) == 0:
            return UnknownTopicOrPartitionError(f"no topic {topic!r}")
        return None

    def alter(
        self, caller: Caller, group_id: str, starts: Mapping[tuple[str, int], int]
    ) -> list[PartitionResult]:
        """Each named partition's new start offset: its result, in the order given."""
        self._check_group(caller, group_id, "Read", "AlterShareGroupOffsets")
        if any(offset < 0 for offset in starts.values()):
            raise InvalidRequestError("a share-partition start offset is at least 0")
        results = []
        for (topic, index), offset in starts.items():
            error = self._topic_error(caller, topic)
            if error is None and not 0 <= index < self.share.partitions_of(topic):
                error = UnknownTopicOrPartitionError(f"no partition {topic}-{index}")
            if error is None:
                try:
                    self.share.router.reset_start((group_id, topic, index), offset)
                except SeglogError as exc:
                    error = exc
            results.append(PartitionResult(topic, index, error))
        return results

    def delete(
        self, caller: Caller, group_id: str, topics: Sequence[str]
    ) -> list[tuple[str, SeglogError | None]]:
        """Delete the group's state on every partition of each topic: each topic's result."""
        self._check_group(caller, group_id, "Delete", "DeleteShareGroupOffsets")
        results: list[tuple[str, SeglogError | None]] = []
        for topic in topics:
            error = self._topic_error(caller, topic)
            if error is None:
                try:
                    for index in range(self.share.partitions_of(topic)):
                        self.share.router.reset_start((group_id, topic, index), None)
                except SeglogError as exc:
                    error = exc
            results.append((topic, error))
        return results
