"""seglog's share consumer (KIP-932 share groups, Kafka's KafkaShareConsumer in shape):
many consumers read the same partitions, each record handed to one of them at a time under
an acquisition lock, acknowledged one by one.

    consumer = ShareConsumer("127.0.0.1:7070", group_id="workers")
    consumer.subscribe(["jobs"])
    while True:
        for record in consumer.poll(timeout_ms=1000):
            handle(record.value)           # record.delivery_count: 1, 2, ...
        # implicit mode: the next poll (or commit_sync, or close) accepts them all

With `share_acknowledgement_mode="explicit"` every record of a poll is acknowledged before
the next poll: `acknowledge(record, AcknowledgeType.ACCEPT | RELEASE | REJECT)`. RELEASE
hands the record out again (its delivery count + 1), REJECT archives it; a record whose lock
lapses (the gateway's group.share.record.lock.duration.ms) goes back too, and one delivered
group.share.delivery.count.limit times is archived. Acknowledgements ride on the next
poll's fetch; `commit_sync` sends them at once and answers each partition's outcome,
`commit_async` does so on a thread of its own. `close` sends what is pending and closes the
share session, releasing every record the consumer still holds.

All calls go to the group's coordinator (found with FindCoordinator): it keeps the group's
membership (share_heartbeats.py) and this consumer's share session, and reaches the
gateways holding the share partitions' state itself. The calls are the ShareGroups gRPC
service's (share_groups.proto); records come as their stored batches (share_acks.py).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from ..errors import NodeUnavailableError, SeglogError
from ..rpc.status import error_from_code, error_from_rpc
from ..v1 import groups_pb2, share_groups_pb2, share_groups_pb2_grpc
from .config import pop_bootstrap
from .gateway import GatewayClient, default_bootstrap
from .share_acks import (
    Acknowledgements,
    AcknowledgeType,
    IllegalAcknowledgeError,
    Key,
    ShareRecord,
    decode,
    partition_acks,
)
from .share_config import share_config
from .share_heartbeats import ShareHeartbeats
from .structs import TopicPartition

logger = logging.getLogger(__name__)

INITIAL_EPOCH, FINAL_EPOCH, MAX_EPOCH = 0, -1, 2**31 - 1
# The session is gone or out of step: a new one is opened and the acknowledgements resent
# (the records stay the member's: locks are the member's, not the session's).
_SESSION_ERRORS = ("SHARE_SESSION_NOT_FOUND", "INVALID_SHARE_SESSION_EPOCH")
CommitResult = dict[TopicPartition, SeglogError | None]


class ShareConsumer:
    def __init__(self, bootstrap: str | None = None, **config: Any) -> None:
        bootstrap = pop_bootstrap(bootstrap, config)
        self.config = share_config(config)
        self.group_id = self.config.group_id
        self._timeout_s = self.config.request_timeout_ms / 1000
        self._client = GatewayClient(
            bootstrap or default_bootstrap(),
            timeout_s=self._timeout_s,
            security=self.config.security(),
            client_id=self.config.client_id,
        )
        self._stubs: dict[str, share_groups_pb2_grpc.ShareGroupsStub] = {}
        self._heartbeats = ShareHeartbeats(
            self.group_id, self.config.client_id, self._call, self._timeout_s
        )
        self._acks = Acknowledgements()
        self._ack_errors: dict[Key, SeglogError] = {}  # acknowledgements refused, not told yet
        self._session_lock = threading.Lock()  # one session call at a time: epochs in order
        self._session_epoch = INITIAL_EPOCH  # the next call's
        self._session_partitions: set[Key] = set()
        self._subscription: tuple[str, ...] = ()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    @property
    def member_id(self) -> str:
        return self._heartbeats.member_id

    # -- what to read ----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group reading these topics (replacing any earlier subscription)."""
        self._check_open()
        wanted = tuple(sorted(set(topics)))
        if not wanted or not all(isinstance(t, str) and t for t in wanted):
            raise SeglogError("subscribe() takes a non-empty list of topic names")
        self._subscription = wanted
        self._heartbeats.subscribe(wanted)

    def subscription(self) -> set[str]:
        return set(self._subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member fetches from now (shared with other members)."""
        return set(self._heartbeats.assignment())

    # -- reading -----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[ShareRecord]:
        """The records acquired for this member, waiting up to `timeout_ms` for some."""
        self._check_open()
        if not self._subscription:
            raise SeglogError("poll() before subscribe()")
        if not self.config.explicit:
            self._acks.accept_delivered()
        elif self._acks.unacknowledged():
            raise IllegalAcknowledgeError(
                f"{self._acks.unacknowledged()} records of the last poll are not acknowledged "
                "(explicit mode acknowledges every record before the next poll)"
            )
        deadline_s = time.monotonic() + max(timeout_ms, 0) / 1000
        backoff_s = self.config.retry_backoff_ms / 1000
        while True:
            if self._heartbeats.refused is not None:
                raise self._heartbeats.refused
            remaining_s = deadline_s - time.monotonic()
            assigned = {(tp.topic, tp.partition) for tp in self._heartbeats.assignment()}
            records: list[ShareRecord] = []
            if assigned:
                wait_ms = int(max(min(remaining_s * 1000, self.config.fetch_max_wait_ms), 0))
                records = self._fetch(assigned, wait_ms)
            elif remaining_s > 0:
                self._heartbeats.wait_assigned(min(remaining_s, backoff_s))
            if records or deadline_s - time.monotonic() <= 0:
                return records

    def acknowledge(
        self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """Explicit mode: this record of the last poll is processed (ACCEPT), to be handed
        out again (RELEASE) or never again (REJECT). Sent with the next poll or commit."""
        self._check_open()
        if not self.config.explicit:
            raise IllegalAcknowledgeError(
                "acknowledge() needs share_acknowledgement_mode='explicit'"
            )
        self._acks.acknowledge(record, AcknowledgeType(type))

    def commit_sync(self, timeout_ms: int | None = None) -> CommitResult:
        """Send the pending acknowledgements now; each partition's outcome (None: applied;
        an error: none of that partition's were, its records come back when their locks
        lapse), with any refused on earlier polls."""
        self._check_open()
        if not self.config.explicit:
            self._acks.accept_delivered()
        timeout_s = self._timeout_s if timeout_ms is None else timeout_ms / 1000
        with self._session_lock:
            taken = self._acks.take()
            if taken:
                self._acknowledge_locked(taken, timeout_s)
            errors, self._ack_errors = self._ack_errors, {}
        outcome: CommitResult = {TopicPartition(*key): None for key in taken}
        outcome.update({TopicPartition(*key): error for key, error in errors.items()})
        return outcome

    def commit_async(
        self, callback: Callable[[CommitResult], object] | None = None
    ) -> concurrent.futures.Future[CommitResult]:
        """commit_sync on a thread of the consumer's; `callback` hears its outcome."""
        self._check_open()
        if not self.config.explicit:
            self._acks.accept_delivered()
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, "share-commit")
        future = self._executor.submit(self.commit_sync)
        if callback is not None:
            future.add_done_callback(lambda f: f.exception() is None and callback(f.result()))
        return future

    def close(self, timeout_ms: int | None = None) -> None:
        """Send what is pending (implicit mode: accepting the last poll's records), close the
        share session (releasing whatever this member still holds) and leave the group."""
        if self._closed:
            return
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if not self.config.explicit:
            self._acks.accept_delivered()
        timeout_s = self._timeout_s if timeout_ms is None else timeout_ms / 1000
        try:
            with self._session_lock:
                taken = self._acks.take()
                if self._session_epoch != INITIAL_EPOCH:
                    self._send_acks(taken, FINAL_EPOCH, timeout_s)
        except (grpc.RpcError, SeglogError) as exc:
            logger.warning("closing the share session of %s: %s", self.group_id, exc)
        finally:
            self._heartbeats.close()
            self._client.close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the calls ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SeglogError("the share consumer is closed")

    def _call(self, method: str, request: Any, timeout_s: float) -> Any:
        """A ShareGroups call at the group's coordinator; a coordinator not reachable is
        looked up again on the next call."""
        coordinators = self._client.group_coordinators
        address = coordinators.coordinator_of(self.group_id)
        stub = self._stubs.get(address)
        if stub is None:
            stub = self._stubs[address] = share_groups_pb2_grpc.ShareGroupsStub(
                self._client.channel_to(address)
            )
        try:
            return getattr(stub, method)(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            if address and isinstance(error_from_rpc(exc), NodeUnavailableError):
                coordinators.forget(self.group_id)
            raise

    def _fetch(self, assigned: set[Key], wait_ms: int) -> list[ShareRecord]:
        with self._session_lock:
            taken = self._acks.take()
            elsewhere = {k: v for k, v in taken.items() if k not in assigned}
            if elsewhere or (taken and self._session_epoch == INITIAL_EPOCH):
                # Acknowledgements of partitions not fetched any more go on their own (in a
                # fetch they would join the session), as do those before a session is open.
                self._acknowledge_locked(taken, self._timeout_s)
                taken = {}
            epoch = self._session_epoch
            if epoch == INITIAL_EPOCH:
                self._session_partitions = set()
            added = (assigned - self._session_partitions) | set(taken)
            forgotten = self._session_partitions - assigned
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(forgotten):
                by_topic.setdefault(topic, []).append(partition)
            request = share_groups_pb2.ShareFetchCall(
                group_id=self.group_id,
                member_id=self.member_id,
                session_epoch=epoch,
                max_wait_ms=wait_ms,
                min_bytes=self.config.fetch_min_bytes,
                max_bytes=self.config.fetch_max_bytes,
                max_records=self.config.max_poll_records,
                partitions=partition_acks({key: taken.get(key, {}) for key in added}),
                forgotten=[
                    groups_pb2.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()
                ],
            )
            try:
                response = self._call("ShareFetch", request, wait_ms / 1000 + self._timeout_s)
            except grpc.RpcError as exc:
                # Whether the gateway saw it is not known: a new session, the acks resent.
                self._acks.put_back(taken)
                self._session_epoch = INITIAL_EPOCH
                failure = error_from_rpc(exc)
                if not failure.retriable:
                    raise failure from None  # not allowed, say: trying again will not help
                logger.info("share fetch of %s failed: %s", self.group_id, failure)
                time.sleep(self.config.retry_backoff_ms / 1000)
                return []
            if response.error:
                self._acks.put_back(taken)
                self._session_refused(error_from_code(response.error, response.error_message))
                return []
            self._session_epoch = _next_epoch(epoch)
            self._session_partitions = (self._session_partitions | added) - forgotten
            records: list[ShareRecord] = []
            gaps: dict[Key, list[int]] = {}
            for answer in response.partitions:
                key = (answer.topic, answer.partition)
                if answer.ack_error:
                    self._ack_errors[key] = error_from_code(
                        answer.ack_error, answer.ack_error_message
                    )
                if answer.error:
                    logger.debug("share fetch of %s-%d: %s", *key, answer.error_message)
                    continue
                got, missing = decode(
                    answer, self.config.key_deserializer, self.config.value_deserializer
                )
                records += got
                if missing:
                    gaps[key] = missing
            self._acks.delivered(records, gaps)
            return records

    def _acknowledge_locked(self, taken: dict[Key, dict[int, int]], timeout_s: float) -> None:
        """Send `taken` on a ShareAcknowledge (opening a session first if there is none);
        refused partitions are kept in _ack_errors."""
        for _ in range(2):  # a session lost meanwhile is opened again once
            if self._session_epoch == INITIAL_EPOCH:
                self._open_session(timeout_s)
            try:
                self._send_acks(taken, self._session_epoch, timeout_s)
                return
            except _SessionLost:
                continue
        raise SeglogError(f"share group {self.group_id}: no share session to acknowledge in")

    def _send_acks(self, taken: dict[Key, dict[int, int]], epoch: int, timeout_s: float) -> None:
        request = share_groups_pb2.ShareAcknowledgeCall(
            group_id=self.group_id,
            member_id=self.member_id,
            session_epoch=epoch,
            partitions=partition_acks(taken),
        )
        try:
            response = self._call("ShareAcknowledge", request, timeout_s)
        except grpc.RpcError as exc:
            self._acks.put_back(taken)
            self._session_epoch = INITIAL_EPOCH
            raise error_from_rpc(exc) from None
        if response.error:
            self._acks.put_back(taken)
            self._session_refused(error_from_code(response.error, response.error_message))
            raise _SessionLost()
        self._session_epoch = INITIAL_EPOCH if epoch == FINAL_EPOCH else _next_epoch(epoch)
        for answer in response.partitions:
            if answer.error:
                key = (answer.topic, answer.partition)
                self._ack_errors[key] = error_from_code(answer.error, answer.error_message)

    def _open_session(self, timeout_s: float) -> None:
        request = share_groups_pb2.ShareFetchCall(
            group_id=self.group_id,
            member_id=self.member_id,
            session_epoch=INITIAL_EPOCH,
            max_records=0,
        )
        try:
            response = self._call("ShareFetch", request, timeout_s)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None
        if response.error:
            raise error_from_code(response.error, response.error_message)
        self._session_partitions = set()
        self._session_epoch = _next_epoch(INITIAL_EPOCH)

    def _session_refused(self, error: SeglogError) -> None:
        if error.reason in _SESSION_ERRORS:
            logger.info("share group %s: a new share session: %s", self.group_id, error)
            self._session_epoch = INITIAL_EPOCH
            return
        raise error


class _SessionLost(Exception):
    """The share session was refused (not found, out of step): open another."""


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1
