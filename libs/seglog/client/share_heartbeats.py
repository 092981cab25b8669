"""A share consumer's membership of its share group: the ShareGroups service's
ShareGroupHeartbeat on a thread of its own, every heartbeat interval the coordinator gives.

The member id is the client's (a UUID), as KIP-932's consumer makes it. It joins at epoch 0
with its subscription, then heartbeats at the epoch it was told; an answer carrying an
assignment replaces the partitions it fetches from. Fenced (FENCED_MEMBER_EPOCH) or
forgotten (UNKNOWN_MEMBER_ID: its session lapsed) it joins again at epoch 0 with the same id,
as Kafka's share consumer does. Leaving sends epoch -1.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

import grpc

from ..errors import SeglogError
from ..rpc.status import error_from_code, error_from_rpc
from ..v1 import share_groups_pb2
from .structs import TopicPartition

logger = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
_REJOIN = ("FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID")
DEFAULT_INTERVAL_MS = 5000  # Kafka's group.share.heartbeat.interval.ms, until told


class ShareHeartbeats:
    def __init__(
        self, group_id: str, client_id: str, call: Callable[..., object], timeout_s: float
    ) -> None:
        """`call(method, request, timeout)`: a ShareGroups call at the group's coordinator."""
        self.group_id = group_id
        self.client_id = client_id
        self.member_id = str(uuid.uuid4())
        self._call = call
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._epoch = JOIN_EPOCH
        self._topics: tuple[str, ...] = ()
        self._sent_topics: tuple[str, ...] | None = None
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._interval_s = DEFAULT_INTERVAL_MS / 1000
        self._assigned = threading.Event()  # a first answer with an assignment came
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The last heartbeat's refusal that trying again will not cure (None: none).
        self.refused: SeglogError | None = None

    def subscribe(self, topics: tuple[str, ...]) -> None:
        with self._lock:
            self._topics = topics
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"share-heartbeat-{self.group_id}", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def assignment(self) -> frozenset[TopicPartition]:
        with self._lock:
            return self._assignment

    def wait_assigned(self, timeout_s: float) -> bool:
        return self._assigned.wait(timeout_s)

    def close(self) -> None:
        """Stop heartbeating and leave the group (epoch -1)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout_s)
        request = share_groups_pb2.ShareHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=LEAVE_EPOCH,
            subscription_unchanged=True,
            client_id=self.client_id,
        )
        try:
            self._call("ShareGroupHeartbeat", request, self._timeout_s)
        except grpc.RpcError as exc:
            logger.warning("leaving share group %s: %s", self.group_id, error_from_rpc(exc))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.beat()
            self._wake.wait(self._interval_s)
            self._wake.clear()

    def beat(self) -> bool:
        """One heartbeat; False when it got no answer or was refused."""
        with self._lock:
            epoch, topics = self._epoch, self._topics
            unchanged = epoch != JOIN_EPOCH and topics == self._sent_topics
        request = share_groups_pb2.ShareHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            subscribed_topics=list(topics),
            subscription_unchanged=unchanged,
            client_id=self.client_id,
        )
        try:
            response = self._call("ShareGroupHeartbeat", request, self._timeout_s)
        except grpc.RpcError as exc:
            failure = error_from_rpc(exc)
            if not failure.retriable:
                self.refused = failure  # not allowed, say: poll raises it
            logger.debug("share heartbeat failed: %s", failure)
            return False
        assert isinstance(response, share_groups_pb2.ShareHeartbeatResponse)
        if response.error:
            error = error_from_code(response.error, response.error_message)
            with self._lock:
                if error.reason in _REJOIN:
                    logger.info("share group %s: joining again: %s", self.group_id, error)
                    self._epoch, self._sent_topics = JOIN_EPOCH, None
                    self._wake.set()
                elif not error.retriable:
                    self.refused = error  # poll raises it (a consumer group has the id...)
            logger.debug("share heartbeat refused: %s", error)
            return False
        with self._lock:
            self.refused = None
            self._epoch = response.member_epoch
            self._sent_topics = topics
            self._interval_s = max(response.heartbeat_interval_ms, 1) / 1000
            if response.has_assignment:
                self._assignment = frozenset(
                    TopicPartition(tp.topic, p) for tp in response.assignment for p in tp.partitions
                )
                self._assigned.set()
        return True
