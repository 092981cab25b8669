"""A consumer's side of a KIP-848 group (`group_protocol="consumer"`): the GroupCoordinator
service's ConsumerGroupHeartbeat, the same groups Kafka clients join with
`group.protocol=consumer`.

The heartbeat thread sends the member's whole subscription and the partitions it owns every
heartbeat_interval_ms (the coordinator's; seglog's full heartbeat), and keeps the answer's
assignment as the target. When the target differs from what the consumer reads, the next
`poll` moves to it (committing first with auto-commit, as before a classic rebalance), and
the heartbeat is sent at once: it tells the coordinator the partitions given up are free,
which is when their new owners get them. No JoinGroup waits, no generation stops the group.

Commits carry the member epoch where the classic protocol carries the generation. A member
that does not poll within max_poll_interval_ms leaves (epoch -1), as a classic one does, so
its partitions go to members that read; its commits then fail and its next poll joins. A member
fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: its session ended) gives up its partitions
and joins again as a new member, as Kafka's consumer does.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable

import grpc

from ..errors import SeglogError
from ..rpc.status import error_from_code, error_from_rpc
from ..v1 import groups_pb2
from .config import ConsumerConfig
from .coordinators import GroupCoordinators
from .membership import GroupMembership, _past
from .structs import TopicPartition

logger = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
# Errors after which the member starts again as a new one (Kafka's fenced member).
_FENCED = ("FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID")


class ConsumerProtocolMembership(GroupMembership):
    """GroupMembership's interface (and its offsets calls) over KIP-848 heartbeats: `join`,
    the heartbeat thread and leaving are this protocol's."""

    def __init__(self, config: ConsumerConfig, coordinators: GroupCoordinators) -> None:
        self._topics: tuple[str, ...] = ()
        self._target: set[TopicPartition] | None = None  # the last answer's assignment
        self._interval_s = config.heartbeat_interval_ms / 1000
        self._wake = threading.Event()
        self._beat_lock = threading.Lock()  # one heartbeat in flight: the thread's or a join's
        super().__init__(config, coordinators)

    def join(
        self, topics: Iterable[str], deadline_s: float | None = None
    ) -> set[TopicPartition] | None:
        """The partitions to read now: after a first heartbeat for a new member or a new
        subscription, else the last answer's. None when the coordinator was not reached
        before `deadline_s`."""
        wanted = tuple(sorted(set(topics)))
        with self._lock:
            if not self.member_id:  # a new member owns nothing (Kafka refuses a join that does)
                self.member_id, self.generation, self._target = str(uuid.uuid4()), JOIN_EPOCH, None
                self.assignment = set()
            needs_answer = self._target is None or wanted != self._topics
            self._topics = wanted
        backoff_s = self.config.retry_backoff_ms / 1000
        while needs_answer and not self._beat():
            if self._stop.is_set():
                raise SeglogError("the consumer is closing")
            if _past(deadline_s, backoff_s):
                return None
            self._stop.wait(backoff_s)
            with self._lock:
                needs_answer = self._target is None
        with self._lock:
            if self._target is None:
                return None  # fenced meanwhile: the next poll joins anew
            self.assignment = set(self._target)
            self._rejoin_needed.clear()
            self._left_for_slow_poll = False
        self._wake.set()  # the coordinator learns at once what this member gave up
        logger.info(
            "group %s: member %s at epoch %d reads %d partitions",
            self.group_id,
            self.member_id,
            self.generation,
            len(self.assignment),
        )
        return set(self.assignment)

    def _leave_group(self, *, slow_poll: bool = False) -> None:
        with self._lock:
            member_id, epoch = self.member_id, self.generation
            self.member_id, self.generation, self._target = "", -1, None
            if slow_poll:
                self._left_for_slow_poll = True
                self._rejoin_needed.set()
        if member_id and epoch >= 0:
            request = self._request(member_id, LEAVE_EPOCH, (), set())
            try:
                self.stub.ConsumerGroupHeartbeat(request, timeout=self._timeout_s)
            except grpc.RpcError as exc:
                logger.warning("leaving group %s failed: %s", self.group_id, error_from_rpc(exc))

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._heartbeats.join(timeout=5)

    # -- heartbeats -------------------------------------------------------------------------

    def _request(
        self, member_id: str, epoch: int, topics: tuple[str, ...], owned: set[TopicPartition]
    ) -> groups_pb2.ConsumerGroupHeartbeatRequest:
        request = groups_pb2.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=member_id,
            member_epoch=epoch,
            client_id=self.config.client_id,
            topics=list(topics),
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
        )
        by_topic: dict[str, list[int]] = {}
        for tp in owned:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        for topic, partitions in sorted(by_topic.items()):
            request.owned.add(topic=topic, partitions=sorted(partitions))
        return request

    def _beat(self) -> bool:
        """One heartbeat with what the member owns now; False when it got no answer."""
        with self._beat_lock:
            with self._lock:
                member_id, epoch = self.member_id, self.generation
                topics = self._topics
                owned = set(self.assignment) if epoch != JOIN_EPOCH else set()
            if not member_id or epoch < 0:
                return False
            request = self._request(member_id, epoch, topics, owned)
            try:
                response = self.stub.ConsumerGroupHeartbeat(request, timeout=self._timeout_s)
            except grpc.RpcError as exc:
                logger.debug("heartbeat failed: %s", error_from_rpc(exc))
                return False
            if response.error:
                self._refused(member_id, error_from_code(response.error, response.error_message))
                return False
            target = {
                TopicPartition(tp.topic, p) for tp in response.assignment for p in tp.partitions
            }
            with self._lock:
                if self.member_id != member_id:
                    return False  # left meanwhile
                self.generation = response.member_epoch
                self._interval_s = max(response.heartbeat_interval_ms, 1) / 1000
                self._target = target
                if target != self.assignment:
                    self._rejoin_needed.set()  # the next poll moves to it
            return True

    def _refused(self, member_id: str, error: SeglogError) -> None:
        if getattr(error, "reason", "") in _FENCED:
            logger.info("group %s: member %s fenced: %s", self.group_id, member_id, error)
            with self._lock:
                if self.member_id == member_id:
                    self.member_id, self.generation, self._target = "", -1, None
                    self._rejoin_needed.set()  # give its partitions up, then join anew
        else:
            logger.debug("heartbeat refused: %s", error)

    def _heartbeat_loop(self) -> None:
        max_poll_interval_s = self.config.max_poll_interval_ms / 1000
        while True:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            stalled_s = time.monotonic() - self._last_poll_s
            with self._lock:
                joined = bool(self.member_id) and self.generation >= 0
            if joined and stalled_s > max_poll_interval_s:
                # As a classic member (KIP-62); a target waiting for its poll does not excuse it.
                self._leave_for_slow_poll(stalled_s)
                continue
            self._beat()
