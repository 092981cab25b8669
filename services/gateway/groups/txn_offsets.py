"""Transactional offsets (Kafka's TxnOffsetCommit, KIP-98/KIP-447): a transactional producer
commits a consumer group's offsets inside its transaction; they are written to the group's
`__consumer_offsets` partition at once, as a transactional batch carrying the producer's id
and epoch (Kafka's offset-commit record format, no sequence, as Kafka's coordinator writes
them), and held pending per producer id until the transaction ends: the COMMIT marker makes
them the group's committed offsets, the ABORT marker drops them. OffsetFetch does not see
them meanwhile; with require_stable (v7+) it answers UNSTABLE_OFFSET_COMMIT for the
partitions that have some.

How the group's coordinator learns that a transaction ended:
- on the gateway whose transaction coordinator wrote the marker into the group's partition,
  that coordinator calls `complete_transactional_offsets` (txn.md's hook) once the marker is
  written;
- with several gateways, the transaction's coordinator may be another gateway than the
  group's: its hook call finds the partition not loaded here and does nothing. The group's
  coordinator reads its partition's tail (from where it stopped reading) before it answers
  for a group that has pending offsets (OffsetFetch, TxnOffsetCommit, OffsetCommit's
  answer), and applies the markers it finds, in log order, as a load does. Pending offsets
  are thus settled by what is in the log, whichever gateway wrote the marker; a gateway
  that takes the partition over (failover) reads it whole and gets the same state.

Checks are Kafka's (KafkaApis.handleTxnOffsetCommitRequest and the group coordinator's
validateTransactionalOffsetCommit): Write on the transactional id, then Read on the group,
then each topic (Read; unknown: UNKNOWN_TOPIC_OR_PARTITION). The group metadata the request
carries (v3+, KIP-447) fences zombies: a member id or generation given must be the group's
current ones (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION); generation -1 with
no member id is accepted whatever the group's state, as Kafka does for older producers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from seglog.coordinator_errors import FencedMemberEpochError, StaleMemberEpochError
from seglog.errors import IllegalGenerationError, PermissionDeniedError, SeglogError
from seglog.records import RecordBatchBuilder

from ..authorization import Authorization
from ..broker.caller import Caller
from .classic_protocol import named_member
from .consumer_groups import ConsumerGroups
from .coordinator import GroupCoordinator, check_group_id
from .group_state import OffsetToCommit
from .offsets_formats import CommittedOffset, encode_offset_key, encode_offset_value
from .offsets_store import OffsetsStore

T = TypeVar("T")
logger = logging.getLogger(__name__)


class TransactionalIdDeniedError(PermissionDeniedError):
    """The caller may not Write the transactional id (Kafka's
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, not the group's code)."""


@dataclass(frozen=True)
class TxnOffsetCommit:
    """A TxnOffsetCommit request, decoded."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: tuple[OffsetToCommit, ...]
    generation: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


# Called before a transactional offset commit is written, with the request (the transaction
# coordinator's verification that the group's partition is in the producer's transaction,
# KIP-890; it raises the error to answer). None: nothing verified.
Verifier = Callable[[TxnOffsetCommit, int], None]


class OnCoordinator(Protocol):
    """The groups core's gate (groups_core.py): `work`'s answer once the caller may call
    the API on the group and this gateway coordinates it."""

    def __call__(self, caller: Caller, api: str, group_id: str, work: Callable[[], T]) -> T: ...


class TransactionalOffsets:
    """The groups core's part for transactions (GroupsCore holds one, handing it its gate
    and its check of an offset to commit)."""

    def __init__(
        self,
        offsets: OffsetsStore,
        coordinator: GroupCoordinator,
        authorization: Authorization,
        on_coordinator: OnCoordinator,
        check_entry: Callable[[OffsetToCommit], SeglogError | None],
        consumer_groups: Callable[[], ConsumerGroups | None] = lambda: None,
    ) -> None:
        self.offsets = offsets
        self.consumer_groups = consumer_groups  # KIP-848 groups, once the core has them
        self.coordinator = coordinator
        self.authorization = authorization
        self.on_coordinator = on_coordinator
        self.check_entry = check_entry
        self.verify: Verifier | None = None

    # -- TxnOffsetCommit ---------------------------------------------------------------------

    def commit(self, caller: Caller, request: TxnOffsetCommit) -> list[SeglogError | None]:
        """Each offset's error or None, in order; raises for the whole request (the
        transactional id or group refused, the member fenced, not the coordinator)."""
        try:
            self.authorization.check(
                caller,
                [("Write", "transactional_id", request.transactional_id)],
                "TxnOffsetCommit",
            )
        except PermissionDeniedError as exc:
            raise TransactionalIdDeniedError(str(exc)) from None

        def work() -> list[SeglogError | None]:
            check_group_id(request.group_id)
            self._check_member(request)
            partition = self.offsets.partition_for(request.group_id)
            if self.verify is not None:
                self.verify(request, partition)
            return self._write(request, partition)

        return self.on_coordinator(caller, "CommitOffsets", request.group_id, work)

    def _check_member(self, request: TxnOffsetCommit) -> None:
        group = self.coordinator.snapshot(request.group_id)
        anonymous = request.generation < 0 and not request.member_id
        if anonymous and request.group_instance_id is None:
            return
        consumer_groups = self.consumer_groups()
        if consumer_groups is not None and consumer_groups.is_consumer_group(request.group_id):
            self._check_consumer_group_member(consumer_groups, request)
            return
        if group is None:
            # Kafka's validateTransactionalOffsetCommit: a group it does not hold.
            raise IllegalGenerationError(
                f"group {request.group_id} has no generation {request.generation}"
            )
        named_member(group, request.member_id, request.group_instance_id)
        if request.generation != group.generation:
            raise IllegalGenerationError(
                f"generation {request.generation} of group {request.group_id} is stale; "
                f"the current one is {group.generation}"
            )

    @staticmethod
    def _check_consumer_group_member(
        consumer_groups: ConsumerGroups, request: TxnOffsetCommit
    ) -> None:
        """A KIP-848 group's member commits in a transaction at its member epoch (the
        request's generation field); a stale one is ILLEGAL_GENERATION, not
        STALE_MEMBER_EPOCH, as Kafka's ConsumerGroup.validateOffsetCommit answers a
        transactional commit (producers do not handle the latter)."""
        partitions = [(o.topic, o.partition) for o in request.offsets]
        try:
            consumer_groups.check_commit(
                request.group_id, request.member_id, request.generation, 9, partitions
            )
        except (StaleMemberEpochError, FencedMemberEpochError) as exc:
            raise IllegalGenerationError(str(exc)) from None

    def _write(self, request: TxnOffsetCommit, partition: int) -> list[SeglogError | None]:
        problems = [self.check_entry(o) for o in request.offsets]
        now_ms = time.time_ns() // 1_000_000
        builder = RecordBatchBuilder(
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            is_transactional=True,
        )
        entries: dict[tuple[str, int], CommittedOffset] = {}
        for o, problem in zip(request.offsets, problems, strict=True):
            if problem is not None:
                continue
            builder.append(
                encode_offset_key(request.group_id, o.topic, o.partition),
                encode_offset_value(o.offset, o.leader_epoch, o.metadata, now_ms),
                now_ms,
            )
            entries[(o.topic, o.partition)] = CommittedOffset(
                o.offset, o.leader_epoch, o.metadata, now_ms
            )
        if not entries:
            return problems
        store = self.offsets
        contents = store.loaded(partition)
        try:
            if request.producer_id in contents.pending:
                # Offsets of this producer's earlier transaction are held: its marker may be
                # in the log, written by another gateway's coordinator; applied first, so
                # this transaction's offsets are not taken for that one's.
                contents = store.catch_up(partition)
            with store.partition_lock(partition):
                at = store.append(partition, builder.build())
                contents.add_pending(request.producer_id, request.group_id, entries, at)
        except SeglogError as exc:
            return [exc if problem is None else problem for problem in problems]
        return problems

    # -- the end of a transaction ------------------------------------------------------------

    def complete(
        self, group_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> None:
        """The producer's pending offsets in the group's partition committed or dropped, once
        its marker is written there (as the marker's replay does: every group of that
        partition the transaction committed offsets for). A partition not loaded here
        (another gateway coordinates the group) is left: its coordinator reads the marker."""
        store = self.offsets
        partition = store.partition_for(group_id)
        with store.partition_lock(partition):
            contents = store.cached(partition)
            if contents is None:
                return
            count = contents.complete(producer_id, committed)
        if count:
            logger.info(
                "%s %d transactional offsets of producer %d (epoch %d) in group %s's partition",
                "committed" if committed else "dropped",
                count,
                producer_id,
                producer_epoch,
                group_id,
            )

    # -- reading -----------------------------------------------------------------------------

    def settled(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions that still have transactional offsets pending, after the
        partition's tail is read for markers written by others (only when some are pending:
        otherwise nothing is read)."""
        store = self.offsets
        partition = store.partition_for(group_id)
        contents = store.loaded(partition)
        if not contents.has_pending(group_id):
            return set()
        contents = store.catch_up(partition)
        return contents.pending_partitions(group_id)
