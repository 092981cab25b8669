"""The marker writer: once a transaction's Prepare state is logged, the COMMIT or ABORT
control batch goes to every partition in it, through the node RPC `WriteTxnMarkers`
(storage.proto) on each partition's leader, one call per leader with all its partitions.

A partition whose marker did not land (leader moved, node down, the node not serving the
RPC yet) is tried again after a backoff that doubles from 100 ms to 5 s (Kafka's writer
retries until the marker lands too): the transaction stays in its Prepare state meanwhile and
the id answers CONCURRENT_TRANSACTIONS. A partition of a deleted topic needs no marker. Once
every marker landed, each group whose offsets were in the transaction is told
(`complete_transactional_offsets`, the groups core's; its __consumer_offsets marker landed
with the rest), then `on_complete` logs the Complete state.

One thread sends; the calls to several leaders of one round go out together (futures).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import grpc

from seglog.v1 import common_pb2, storage_pb2

from ..cluster.registry import Registry
from ..node_connections import NodeConnections
from .log_formats import TopicPartition

logger = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms
MAX_BACKOFF_S = 5.0
MARKER_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms for its marker requests
_RPC_SLACK_S = 5.0


@runtime_checkable
class GroupsCompletion(Protocol):
    """The groups core's hook (services/gateway/groups/): the transaction's pending offsets
    of the group applied (committed) or dropped."""

    def complete_transactional_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> None: ...


@dataclass(frozen=True)
class Completion:
    """A transaction logged in its Prepare state, whose markers are due."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]
    groups: frozenset[str] = frozenset()


@dataclass
class _Pending:
    completion: Completion
    remaining: set[TopicPartition]
    backoff_s: float = FIRST_BACKOFF_S
    attempts: int = 0
    last_errors: dict[TopicPartition, str] = field(default_factory=dict)


class MarkerWriter:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        on_complete: Callable[[Completion], None],
        *,
        groups: object | None = None,
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.on_complete = on_complete
        self.groups = groups if isinstance(groups, GroupsCompletion) else None
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, _Pending]] = []
        self._order = itertools.count()
        self._stopped = False
        self._sending: _Pending | None = None  # the one the thread is sending now
        self.requests_sent = 0  # WriteTxnMarkers calls made (a metric and the tests' view)
        self._thread = threading.Thread(target=self._run, name="txn-markers", daemon=True)
        self._thread.start()

    def submit(self, completion: Completion) -> None:
        pending = _Pending(completion, set(completion.partitions))
        with self._cond:
            heapq.heappush(self._due, (time.monotonic(), next(self._order), pending))
            self._cond.notify()

    def pending(self) -> list[Completion]:
        """The completions whose markers are not all written (the one being sent too)."""
        with self._cond:
            waiting = [entry[2].completion for entry in self._due]
            if self._sending is not None:
                waiting.append(self._sending.completion)
            return waiting

    def pending_ids(self) -> set[str]:
        return {completion.transactional_id for completion in self.pending()}

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._due or self._due[0][0] > time.monotonic()):
                    wait = None if not self._due else self._due[0][0] - time.monotonic()
                    self._cond.wait(timeout=wait)
                if self._stopped:
                    return
                _, _, pending = heapq.heappop(self._due)
                self._sending = pending
            try:
                self._attempt(pending)
            except Exception:  # one transaction's failure must not stop the rest
                logger.exception("writing markers of %s", pending.completion.transactional_id)
            if pending.remaining or not self._finish(pending.completion):
                with self._cond:
                    due = time.monotonic() + pending.backoff_s
                    pending.backoff_s = min(MAX_BACKOFF_S, pending.backoff_s * 2)
                    heapq.heappush(self._due, (due, next(self._order), pending))
                    self._sending = None
            else:
                with self._cond:
                    self._sending = None

    def _attempt(self, pending: _Pending) -> None:
        completion = pending.completion
        pending.attempts += 1
        by_leader: dict[tuple[int, str], list[TopicPartition]] = {}
        for topic, partition in sorted(pending.remaining):
            if topic not in self.registry.topics:
                pending.remaining.discard((topic, partition))  # deleted: no marker needed
                continue
            try:
                route = self.registry.route(topic, partition)
            except Exception as exc:  # no leader now: the next round
                pending.last_errors[(topic, partition)] = str(exc)
                continue
            if not route.live or route.address is None:
                pending.last_errors[(topic, partition)] = f"node {route.leader} is not live"
                continue
            by_leader.setdefault((route.leader, route.address), []).append((topic, partition))
        calls = []
        for (node, address), partitions in by_leader.items():
            request = marker_request(completion, partitions)
            stub = self.connections.get(node, address).stub
            self.requests_sent += 1
            calls.append(
                (
                    partitions,
                    stub.WriteTxnMarkers.future(
                        request, timeout=MARKER_TIMEOUT_MS / 1000 + _RPC_SLACK_S
                    ),
                )
            )
        for partitions, future in calls:
            try:
                response = future.result()
            except grpc.RpcError as exc:
                for tp in partitions:
                    pending.last_errors[tp] = f"{exc.code().name}: {exc.details()}"
                continue
            for result in response.markers[0].partitions if response.markers else []:
                tp = (result.topic, result.partition)
                if result.error == common_pb2.NONE:
                    pending.remaining.discard(tp)
                    pending.last_errors.pop(tp, None)
                elif (
                    result.error
                    in (
                        common_pb2.UNKNOWN_TOPIC_OR_PARTITION,
                        common_pb2.INVALID_PRODUCER_EPOCH,
                    )
                    and result.topic not in self.registry.topics
                ):
                    pending.remaining.discard(tp)
                else:
                    pending.last_errors[tp] = (
                        f"{common_pb2.ErrorCode.Name(result.error)}: {result.error_message}"
                    )
        if pending.remaining and pending.attempts in (1, 10, 100):
            logger.warning(
                "markers of transactional id %s not yet written (attempt %d): %s",
                completion.transactional_id,
                pending.attempts,
                "; ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(pending.last_errors.items())[:4]),
            )

    def _finish(self, completion: Completion) -> bool:
        """Every marker landed: the groups told, the Complete state logged (False: that
        log write failed, tried again later)."""
        if self.groups is not None:
            for group_id in sorted(completion.groups):
                try:
                    self.groups.complete_transactional_offsets(
                        group_id,
                        completion.producer_id,
                        completion.producer_epoch,
                        completion.committed,
                    )
                except Exception:  # the group's coordinator reads the marker
                    logger.exception("completing offsets of group %s", group_id)
        try:
            self.on_complete(completion)
        except Exception as exc:  # tried again after a backoff
            logger.warning("logging completion of %s: %s", completion.transactional_id, exc)
            return False
        return True


def marker_request(
    completion: Completion, partitions: list[TopicPartition]
) -> storage_pb2.WriteTxnMarkersRequest:
    request = storage_pb2.WriteTxnMarkersRequest(timeout_ms=MARKER_TIMEOUT_MS)
    request.markers.add(
        producer_id=completion.producer_id,
        producer_epoch=completion.producer_epoch,
        committed=completion.committed,
        coordinator_epoch=completion.coordinator_epoch,
        partitions=[storage_pb2.HostedPartitionRef(topic=t, partition=p) for t, p in partitions],
    )
    return request
