"""A consumer's side of its group: joining, heartbeats on their own thread, committing and
reading committed offsets through the gateway's GroupCoordinator service.

The heartbeat thread only keeps the session alive and notices a rebalance (or a lost
membership); the consumer joins again from its own thread, inside `poll`, so that partitions
change hands between polls and never under the caller's feet.

As in Kafka (KIP-62), heartbeats prove the process alive, `poll` proves it making progress:
when a member has not polled for `max_poll_interval_ms`, the heartbeat thread leaves the group
for it, so its partitions go to members that are reading. Its commits then fail with
CommitFailedError, and its next `poll` joins again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping

import grpc

from ..errors import (
    IllegalGenerationError,
    RebalanceInProgressError,
    RequestTimedOutError,
    SeglogError,
    UnknownMemberIdError,
)
from ..rpc.status import error_from_code, error_from_rpc
from ..v1 import groups_pb2
from .config import ConsumerConfig
from .coordinators import GroupCoordinators
from .structs import OffsetAndMetadata, TopicPartition

logger = logging.getLogger(__name__)


class CommitFailedError(SeglogError):
    """A commit refused because the group rebalanced (Kafka's CommitFailedException): the
    partitions may now belong to another member, which will read from the last commit."""

    reason = "REBALANCE_IN_PROGRESS"


_REJOIN_ERRORS = (RebalanceInProgressError, UnknownMemberIdError, IllegalGenerationError)


class GroupMembership:
    def __init__(self, config: ConsumerConfig, coordinators: GroupCoordinators) -> None:
        assert config.group_id is not None
        self.config = config
        self.group_id = config.group_id
        self.stub = coordinators.stub_for(config.group_id)
        self.member_id = ""
        self.generation = -1
        self.assignment: set[TopicPartition] = set()
        self._rejoin_needed = threading.Event()
        self._rejoin_needed.set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timeout_s = config.request_timeout_ms / 1000
        self._last_poll_s = time.monotonic()
        self._left_for_slow_poll = False
        # The partitions last answered unstable (a transaction's offsets pending), and until
        # when that answer stands (committed_for_positions).
        self._unstable: set[TopicPartition] = set()
        self._unstable_until = 0.0
        self._heartbeats = threading.Thread(
            target=self._heartbeat_loop, name=f"{config.client_id}-heartbeat", daemon=True
        )
        self._heartbeats.start()

    @property
    def rejoin_needed(self) -> bool:
        return self._rejoin_needed.is_set()

    def request_rejoin(self) -> None:
        self._rejoin_needed.set()

    def polled(self) -> None:
        """The consumer is in `poll`: restart the max_poll_interval_ms clock."""
        self._last_poll_s = time.monotonic()

    def join(
        self, topics: Iterable[str], deadline_s: float | None = None
    ) -> set[TopicPartition] | None:
        """Join (again) and wait for the new generation; returns its assignment. None when
        the coordinator could not be reached (or was not ready) before `deadline_s`
        (time.monotonic()): a poll's timeout bounds the retries, and the next poll tries
        again, as Kafka's consumer carries a join across polls."""
        request = groups_pb2.JoinGroupRequest(
            group_id=self.group_id,
            client_id=self.config.client_id,
            topics=sorted(topics),
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            assignment_strategies=list(self.config.partition_assignment_strategy),
        )
        backoff_s = self.config.retry_backoff_ms / 1000
        while not self._stop.is_set():
            with self._lock:
                request.member_id = self.member_id
            try:
                # The coordinator answers when the rebalance completes: up to the longest
                # rebalance timeout of the members, so no short deadline here.
                response = self.stub.JoinGroup(
                    request, timeout=self.config.max_poll_interval_ms / 1000 + self._timeout_s
                )
            except grpc.RpcError as exc:
                error = error_from_rpc(exc)
                if not error.retriable:
                    raise error from None
                if _past(deadline_s, backoff_s):
                    return None
                time.sleep(backoff_s)
                continue
            if response.error:
                error = error_from_code(response.error, response.error_message)
                if isinstance(error, UnknownMemberIdError):
                    with self._lock:
                        self.member_id = ""
                    continue
                if error.retriable:
                    if response.member_id:
                        # The coordinator recorded the join without holding it: call again
                        # as the member it made.
                        with self._lock:
                            self.member_id = response.member_id
                    if _past(deadline_s, backoff_s):
                        return None
                    time.sleep(backoff_s)
                    continue
                raise error
            with self._lock:
                self.member_id = response.member_id
                self.generation = response.generation_id
                self.assignment = {
                    TopicPartition(tp.topic, p) for tp in response.assignment for p in tp.partitions
                }
                self._left_for_slow_poll = False
                self._last_poll_s = time.monotonic()  # the join itself may have taken long
                self._rejoin_needed.clear()
            logger.info(
                "joined group %s generation %d as %s: %d partitions",
                self.group_id,
                self.generation,
                self.member_id,
                len(self.assignment),
            )
            return set(self.assignment)
        raise SeglogError("the consumer is closing")

    def leave(self) -> None:
        self._stop.set()
        self._leave_group()

    def _leave_group(self, *, slow_poll: bool = False) -> None:
        with self._lock:
            member_id, self.member_id, self.generation = self.member_id, "", -1
            if slow_poll:
                # With the member id gone in the same step: the next join is a new member's.
                self._left_for_slow_poll = True
                self._rejoin_needed.set()
        if member_id:
            try:
                self.stub.LeaveGroup(
                    groups_pb2.LeaveGroupRequest(group_id=self.group_id, member_id=member_id),
                    timeout=self._timeout_s,
                )
            except grpc.RpcError as exc:
                logger.warning("leaving group %s failed: %s", self.group_id, error_from_rpc(exc))

    def close(self) -> None:
        self._stop.set()
        self._heartbeats.join(timeout=5)

    # -- offsets ----------------------------------------------------------------------------

    def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *, as_member: bool
    ) -> None:
        """Commit; `as_member` when partitions came from the group (subscribe), else as a
        consumer that assigned itself partitions."""
        with self._lock:
            member_id, generation = (self.member_id, self.generation) if as_member else ("", -1)
            if as_member and self._left_for_slow_poll:
                raise CommitFailedError(
                    f"commit refused: this consumer left group {self.group_id} because it did "
                    f"not poll within max_poll_interval_ms ({self.config.max_poll_interval_ms}), "
                    f"and its partitions went to other members. Poll more often (lower "
                    f"max_poll_records or speed up the work between polls) or raise "
                    f"max_poll_interval_ms; the next poll joins the group again"
                )
        request = groups_pb2.CommitOffsetsRequest(
            group_id=self.group_id, member_id=member_id, generation_id=generation
        )
        for tp, meta in offsets.items():
            request.offsets.add(
                topic=tp.topic,
                partition=tp.partition,
                offset=meta.offset,
                leader_epoch=meta.leader_epoch,
                metadata=meta.metadata,
            )
        try:
            response = self.stub.CommitOffsets(request, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None
        if response.error:
            error = error_from_code(response.error, response.error_message)
            if isinstance(error, _REJOIN_ERRORS):
                self._rejoin_needed.set()
                raise CommitFailedError(
                    f"commit refused, the group has rebalanced: {error}; the partitions will "
                    f"be read again from the last committed offsets"
                ) from None
            raise error
        for result in response.partitions:
            if result.error:
                raise error_from_code(result.error, result.error_message)

    def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets; a read_committed consumer waits, up to its
        request timeout, for offsets a transaction has pending (Kafka's consumer retries
        UNSTABLE_OFFSET_COMMIT the same way)."""
        wanted = list(partitions)
        deadline = time.monotonic() + self._timeout_s
        while True:
            found, unstable = self.fetch_committed(wanted)
            if not unstable:
                return found
            if time.monotonic() >= deadline:
                raise RequestTimedOutError(
                    f"group {self.group_id}: a transaction's offsets are still pending for "
                    f"{sorted(unstable)}"
                )
            time.sleep(self.config.retry_backoff_ms / 1000)

    def committed_for_positions(
        self, wanted: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, OffsetAndMetadata | None], set[TopicPartition]]:
        """`fetch_committed` for a poll's partitions without a position; while they all were
        unstable less than retry_backoff_ms ago, they are answered so again without a call
        (a poll loop woken by other partitions' records would ask at every turn)."""
        now = time.monotonic()
        if set(wanted) <= self._unstable and now < self._unstable_until:
            return {}, set(wanted)
        found, unstable = self.fetch_committed(wanted)
        self._unstable = unstable
        self._unstable_until = now + self.config.retry_backoff_ms / 1000
        return found, unstable

    def fetch_committed(
        self, wanted: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, OffsetAndMetadata | None], set[TopicPartition]]:
        """The group's committed offsets, and (read_committed: require_stable) the
        partitions whose offsets a transaction has pending, which have none yet."""
        request = groups_pb2.FetchOffsetsRequest(
            group_id=self.group_id,
            require_stable=self.config.isolation_level == "read_committed",
        )
        by_topic: dict[str, list[int]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        for topic, parts in by_topic.items():
            request.partitions.add(topic=topic, partitions=parts)
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                response = self.stub.FetchOffsets(request, timeout=self._timeout_s)
            except grpc.RpcError as exc:
                raise error_from_rpc(exc) from None
            if not response.error:
                break
            error = error_from_code(response.error, response.error_message)
            if not error.retriable or time.monotonic() >= deadline:
                raise error
            time.sleep(self.config.retry_backoff_ms / 1000)
        out: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
        unstable: set[TopicPartition] = set()
        for entry in response.offsets:
            tp = TopicPartition(entry.topic, entry.partition)
            if entry.unstable:
                unstable.add(tp)
            elif entry.offset >= 0:
                out[tp] = OffsetAndMetadata(entry.offset, entry.metadata, entry.leader_epoch)
        return out, unstable

    # -- heartbeats -------------------------------------------------------------------------

    def _leave_for_slow_poll(self, stalled_s: float) -> None:
        logger.warning(
            "consumer %s has not polled for %.1f s, past max_poll_interval_ms (%d): leaving "
            "group %s so its partitions go to members that are reading; the next poll joins "
            "again. Poll more often (lower max_poll_records) or raise max_poll_interval_ms.",
            self.config.client_id,
            stalled_s,
            self.config.max_poll_interval_ms,
            self.group_id,
        )
        self._leave_group(slow_poll=True)

    def _heartbeat_loop(self) -> None:
        interval_s = self.config.heartbeat_interval_ms / 1000
        max_poll_interval_s = self.config.max_poll_interval_ms / 1000
        while not self._stop.wait(interval_s):
            with self._lock:
                member_id, generation = self.member_id, self.generation
            if not member_id:
                continue
            stalled_s = time.monotonic() - self._last_poll_s
            if stalled_s > max_poll_interval_s and not self._rejoin_needed.is_set():
                self._leave_for_slow_poll(stalled_s)
                continue
            try:
                response = self.stub.Heartbeat(
                    groups_pb2.GroupHeartbeatRequest(
                        group_id=self.group_id, member_id=member_id, generation_id=generation
                    ),
                    timeout=self._timeout_s,
                )
            except grpc.RpcError as exc:
                logger.debug("heartbeat failed: %s", error_from_rpc(exc))
                continue
            if response.error:
                error = error_from_code(response.error, response.error_message)
                if isinstance(error, UnknownMemberIdError):
                    with self._lock:
                        if self.member_id == member_id:
                            self.member_id = ""
                if isinstance(error, _REJOIN_ERRORS):
                    self._rejoin_needed.set()


def _past(deadline_s: float | None, backoff_s: float) -> bool:
    """Whether waiting `backoff_s` more would pass the deadline (None: no deadline)."""
    return deadline_s is not None and time.monotonic() + backoff_s >= deadline_s
