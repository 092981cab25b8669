"""Kafka's DeleteRecords as the broker core does it, for any caller: Delete on each topic
named (Kafka's rule), then each partition's records below the given offset deleted by its
leader (leader_queries.py); the answer is each partition's new low watermark (the leader's
log start offset), or why not."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from seglog.errors import SeglogError
from seglog.rpc.status import error_from_code
from seglog.v1 import common_pb2

from ..authorization import Authorization
from ..broker.caller import Caller
from .data_plane import leader_epoch_field
from .leader_queries import LeaderQueries


@dataclass(frozen=True)
class RecordsBefore:
    topic: str
    partition: int
    offset: int  # records below it are deleted; -1: below the high watermark
    current_leader_epoch: int = -1  # -1: none named, the current leader's


@dataclass(frozen=True)
class RecordsDeleted:
    topic: str
    partition: int
    low_watermark: int  # -1 with an error
    error: SeglogError | None = None


class RecordDeletion:
    def __init__(self, queries: LeaderQueries, authorization: Authorization) -> None:
        self.queries = queries
        self.authorization = authorization

    def delete_records(
        self, caller: Caller, wanted: Sequence[RecordsBefore]
    ) -> list[RecordsDeleted]:
        """Each partition's answer, in order; PermissionDeniedError, before anything is
        deleted, when a topic may not be."""
        topics = sorted({w.topic for w in wanted})
        self.authorization.check(
            caller, [("Delete", "topic", name) for name in topics], "DeleteRecords"
        )
        # What the leaders take (common.proto's DeleteRecords, the storage node's call).
        asked = [
            common_pb2.DeleteRecordsPartition(
                topic=w.topic,
                partition=w.partition,
                offset=w.offset,
                **leader_epoch_field(w.current_leader_epoch),
            )
            for w in wanted
        ]
        return [
            RecordsDeleted(
                a.topic,
                a.partition,
                a.low_watermark,
                None if a.error == common_pb2.NONE else error_from_code(a.error, a.error_message),
            )
            for a in self.queries.delete_records(asked)
        ]
