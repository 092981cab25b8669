"""The marker writer: once a transaction's Prepare state is logged, the COMMIT or ABORT
control batch goes to every partition in it, through the node RPC `WriteTxnMarkers`
(storage.proto) on each partition's leader (marker_sends.py: one call per leader with all
its partitions, the leaders at once).

Several transactions' markers go out at once, up to `max_in_flight` transactions (each on a
reused thread): one leader slow to answer, or one transaction waiting out a leader change,
holds up no other. One transactional id has one completion in flight at a time.

A partition whose marker did not land (leader moved, node down, the node not serving the
RPC yet) is tried again after a backoff that doubles from 50 ms to 1 s, or at once when the
registry reports a change of one of its partitions (`leaders_changed`: Kafka's writer sends
again as soon as its metadata shows the new leader). The transaction stays in its Prepare
state meanwhile and the id answers CONCURRENT_TRANSACTIONS, so the wait is a client's: a
long one (a 5 s cap before) let a producer's EndTxn reach librdkafka's 10 s timeout in a
leader failover. A partition of a deleted topic needs no marker. Once every marker landed,
each group whose offsets were in the transaction is told (`complete_transactional_offsets`,
the groups core's; its __consumer_offsets marker landed with the rest), then `on_complete`
logs the Complete state.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from seglog.reused_threads import ReusedThreads

from ..cluster.registry import Registry
from ..node_connections import NodeConnections
from .log_formats import TopicPartition
from .marker_sends import MARKER_TIMEOUT_MS, Completion, MarkerRound, marker_request, send_round

__all__ = ["MARKER_TIMEOUT_MS", "Completion", "MarkerWriter", "marker_request"]

logger = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
MAX_IN_FLIGHT = 16  # transactions whose markers are being sent at once


@runtime_checkable
class GroupsCompletion(Protocol):
    """The groups core's hook (services/gateway/groups/): the transaction's pending offsets
    of the group applied (committed) or dropped."""

    def complete_transactional_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> None: ...


@dataclass(eq=False)
class _Pending:
    state: MarkerRound
    backoff_s: float
    attempts: int = 0
    # A partition of it changed leader while a round was out: the next round goes at once.
    moved: bool = False

    @property
    def completion(self) -> Completion:
        return self.state.completion


class MarkerWriter:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        on_complete: Callable[[Completion], None],
        *,
        groups: object | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        first_backoff_s: float = FIRST_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.on_complete = on_complete
        self.groups = groups if isinstance(groups, GroupsCompletion) else None
        self.max_in_flight = max_in_flight
        self.first_backoff_s = first_backoff_s
        self.max_backoff_s = max_backoff_s
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, _Pending]] = []
        self._order = itertools.count()
        self._stopped = False
        self._sending: dict[str, _Pending] = {}  # transactional id -> its round out now
        self.requests_sent = 0  # WriteTxnMarkers calls made (a metric and the tests' view)
        self._rounds = ReusedThreads("txn-marker-rounds")
        self._thread = threading.Thread(target=self._run, name="txn-markers", daemon=True)
        self._thread.start()

    def submit(self, completion: Completion) -> None:
        pending = _Pending(
            MarkerRound(completion, set(completion.partitions)), self.first_backoff_s
        )
        with self._cond:
            # Started here when it may start now: the hop through the scheduling thread is a
            # thread switch more on every transaction's way to its markers.
            start = (
                not self._stopped
                and completion.transactional_id not in self._sending
                and len(self._sending) < self.max_in_flight
            )
            if start:
                self._sending[completion.transactional_id] = pending
            else:
                heapq.heappush(self._due, (time.monotonic(), next(self._order), pending))
                self._cond.notify()
        if start:
            self._rounds.run(functools.partial(self._round, pending))

    def pending(self) -> list[Completion]:
        """The completions whose markers are not all written (those being sent too)."""
        with self._cond:
            waiting = [entry[2].completion for entry in self._due]
            waiting.extend(pending.completion for pending in self._sending.values())
            return waiting

    def pending_ids(self) -> set[str]:
        return {completion.transactional_id for completion in self.pending()}

    def leaders_changed(self, partitions: Iterable[TopicPartition]) -> None:
        """The registry's listener: completions waiting on one of these partitions are sent
        again at once (a leader change, a node back), not after their backoff."""
        changed = set(partitions)
        with self._cond:
            now = time.monotonic()
            woken = False
            for index, (due, order, pending) in enumerate(self._due):
                if due > now and not pending.state.remaining.isdisjoint(changed):
                    self._due[index] = (now, order, pending)
                    pending.backoff_s = self.first_backoff_s
                    woken = True
            for pending in self._sending.values():
                if not pending.state.remaining.isdisjoint(changed):
                    pending.moved = True
            if woken:
                heapq.heapify(self._due)
                self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._cond:
                pending = self._next_ready()
                while not self._stopped and pending is None:
                    self._cond.wait(timeout=self._wait_s())
                    pending = self._next_ready()
                if self._stopped:
                    return
                assert pending is not None
                self._sending[pending.completion.transactional_id] = pending
            self._rounds.run(functools.partial(self._round, pending))

    def _next_ready(self) -> _Pending | None:
        """The earliest due completion whose id has no round out, if a round may start
        (hold the lock)."""
        if len(self._sending) >= self.max_in_flight:
            return None
        now = time.monotonic()
        held_back = []
        found = None
        while self._due and self._due[0][0] <= now:
            entry = heapq.heappop(self._due)
            if entry[2].completion.transactional_id in self._sending:
                held_back.append(entry)  # after the round out for that id
            else:
                found = entry[2]
                break
        for entry in held_back:
            heapq.heappush(self._due, entry)
        return found

    def _wait_s(self) -> float | None:
        """How long until the next completion that may start is due (None: until notified,
        by a round's end or a new completion)."""
        if len(self._sending) >= self.max_in_flight:
            return None
        dues = [
            due for due, _, p in self._due if p.completion.transactional_id not in self._sending
        ]
        return max(min(dues) - time.monotonic(), 0.0) if dues else None

    def _round(self, pending: _Pending) -> None:
        done = False
        try:
            self._attempt(pending)
            done = not pending.state.remaining and self._finish(pending.completion)
        except Exception:  # one transaction's failure must not stop the rest
            logger.exception("writing markers of %s", pending.completion.transactional_id)
        with self._cond:
            del self._sending[pending.completion.transactional_id]
            if not done and not self._stopped:
                if pending.moved:
                    due = time.monotonic()
                    pending.moved = False
                else:
                    due = time.monotonic() + pending.backoff_s
                    pending.backoff_s = min(self.max_backoff_s, pending.backoff_s * 2)
                heapq.heappush(self._due, (due, next(self._order), pending))
            self._cond.notify()

    def _attempt(self, pending: _Pending) -> None:
        pending.attempts += 1
        calls = send_round(self.registry, self.connections, pending.state)
        with self._cond:
            self.requests_sent += calls
        state = pending.state
        if state.remaining and pending.attempts in (1, 10, 100):
            logger.warning(
                "markers of transactional id %s not yet written (attempt %d): %s",
                state.completion.transactional_id,
                pending.attempts,
                "; ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(state.last_errors.items())[:4]),
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
