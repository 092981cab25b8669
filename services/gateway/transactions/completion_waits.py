"""Calls parked until a transactional id's previous transaction completes.

EndTxn is answered once the Prepare state is logged (as Kafka answers it); the markers and
the Complete state follow. A producer that begins its next transaction at once sends
AddPartitionsToTxn while they are still being written, and Kafka's answer then is
CONCURRENT_TRANSACTIONS: librdkafka tries again 20 ms later, the Java client after its
retry backoff. The markers take a few milliseconds, so most of those 20 ms are idle, and at
100 records a transaction they were a third of its time (bench/transactions.py). Instead the
coordinator parks the call here and takes it up again the moment the Complete state is
logged, the call's partitions already added (the next transaction's Ongoing state is logged
in the same write: ParkedAdd), or the completion is given up here (the coordinator moved, a
log write failed), or
after `max_wait_s` at the latest, when it answers CONCURRENT_TRANSACTIONS as before (markers
held up by a leader change take longer than a call should be kept).

A parked call is a Future; the Kafka adapter answers it later (kafka/later.py), holding no
request handler thread meanwhile. One thread here ends the waits past their deadline.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field

from seglog.coordinator_errors import ConcurrentTransactionsError

from .state import TxnState

MAX_WAIT_S = 1.0


@dataclass
class ParkedAdd:
    """What the calls parked for one id want added, logged as the next transaction's Ongoing
    state in the same write as the Complete state (one replicated write less between two
    transactions); `producer` is the (producer id, epoch) they were checked against."""

    producer: tuple[int, int]
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)

    def ongoing(self, producer_id: int, epoch: int, now_ms: int) -> dict[str, object] | None:
        """The Ongoing state's changes these adds make, if made by that producer and epoch."""
        if not self.partitions or self.producer != (producer_id, epoch):
            return None
        return {
            "state": TxnState.ONGOING,
            "partitions": set(self.partitions),
            "groups": set(self.groups),
            "start_ms": now_ms,
        }


NOTHING_PARKED = ParkedAdd((-1, -1))


class CompletionPendingError(ConcurrentTransactionsError):
    """CONCURRENT_TRANSACTIONS with the call parked: `completed` is done when the previous
    transaction's completion ends (or the wait's deadline passes); the call may then be
    made again."""

    def __init__(self, message: str, completed: Future[None]) -> None:
        super().__init__(message)
        self.completed = completed


class CompletionWaits:
    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self._cond = threading.Condition()
        self._waiting: dict[str, list[Future[None]]] = {}
        self._parked: dict[str, ParkedAdd] = {}
        self._deadlines: list[tuple[float, int, str, Future[None]]] = []
        self._order = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._expire, name="txn-waits", daemon=True)
        self._thread.start()

    def wait(self, transactional_id: str) -> Future[None]:
        """A future done when the id's completion ends or the wait's deadline passes.
        Register it while holding the lock under which the completion is logged, so the
        release cannot come between the check and the registration."""
        future: Future[None] = Future()
        with self._cond:
            self._waiting.setdefault(transactional_id, []).append(future)
            deadline = time.monotonic() + self.max_wait_s
            heapq.heappush(self._deadlines, (deadline, next(self._order), transactional_id, future))
            self._cond.notify()
        return future

    def park(
        self,
        transactional_id: str,
        producer: tuple[int, int],
        partitions: list[tuple[str, int]],
        groups: set[str],
    ) -> Future[None]:
        """`wait`, keeping what the call adds for the completion to log with it."""
        with self._cond:
            parked = self._parked.setdefault(transactional_id, ParkedAdd(producer))
            if parked.producer == producer:
                parked.partitions.update(partitions)
                parked.groups.update(groups)
        return self.wait(transactional_id)

    def take_parked(self, transactional_id: str) -> ParkedAdd:
        """What the calls parked for the id add (NOTHING_PARKED: none), taken once."""
        with self._cond:
            return self._parked.pop(transactional_id, NOTHING_PARKED)

    def release(self, transactional_id: str) -> None:
        """The id's completion ended (or was given up here): its parked calls go on."""
        with self._cond:
            self._parked.pop(transactional_id, None)
            futures = self._waiting.pop(transactional_id, [])
        for future in futures:
            _done(future)

    def waiting(self) -> int:
        with self._cond:
            return sum(len(futures) for futures in self._waiting.values())

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)
        with self._cond:
            futures = [f for fs in self._waiting.values() for f in fs]
            self._waiting.clear()
        for future in futures:
            _done(future)

    def _expire(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (
                    not self._deadlines or self._deadlines[0][0] > time.monotonic()
                ):
                    wait = None if not self._deadlines else self._deadlines[0][0] - time.monotonic()
                    self._cond.wait(timeout=wait)
                if self._stopped:
                    return
                _, _, tid, future = heapq.heappop(self._deadlines)
                futures = self._waiting.get(tid, [])
                if future in futures:  # not released yet (a few calls per id at most)
                    futures.remove(future)
                    if not futures:
                        del self._waiting[tid]
                        # Answered CONCURRENT_TRANSACTIONS: what it added must not be logged
                        # (dropped before the call is taken up again, so the completion
                        # either took it first, and the call finds it added, or never will).
                        self._parked.pop(tid, None)
            _done(future)


def _done(future: Future[None]) -> None:
    """Complete `future` unless it is already (released, or cancelled by a closed
    connection)."""
    try:
        future.set_result(None)
    except InvalidStateError:
        pass
