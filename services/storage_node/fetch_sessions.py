"""The leader's side of follower fetch sessions (Kafka's KIP-227, FetchSession.java), so that
idle replication costs O(1) per round instead of O(partitions).

A follower opens a session with a full request (session id 0, epoch 0) naming every partition
it fetches from this node; the leader keeps, per partition, what the follower last asked
(fetch offset, leader epochs, log start) and what it was last answered (high watermark, log
start, the error or diverging epoch answered). Later requests carry the session id and its
next epoch, and name only partitions that are new or whose fetch state changed, and those to
forget; an idle round names none.

The session is a `Waiter` registered for its partitions (fetch_waits.py): an append or a
high-watermark move on P marks P changed in the sessions holding it. A round evaluates only
the partitions the request named and those marked changed (plus every partition once per
`FULL_RECHECK_S`, which catches what no wake-up reports, such as the log start moved by
retention), and answers those with news for the follower. Records (its fetch offset is below
the log end), or an error or a diverging epoch other than the one last answered, answer a
waiting round at once; a high watermark or log start other than the one last answered goes
with the next such answer or at the wait's end, as Kafka's delayed fetch completes on bytes,
not on a new high watermark (so an acks=all produce costs each follower one round, not two).
A follower that drops an answer names the partition again, which resets what the leader
remembers of it. With no news, a round waits on the session's own event. A named partition is
answered at least once, at the latest when the wait ends (its answered state is reset).
Evaluating a partition records the follower's fetch at its last fetch offset
(Partition.record_follower_fetch), as Kafka's session does for every partition of every
fetch: a partition the follower has not named since still holds everything below that offset.
And since an idle round evaluates nothing, the leader asks the session before its log end
moves (`caught_up_ms`): a follower whose session holds the partition at the log end was
caught up as of its last request (now, while a request waits), so the append that follows
does not make it look behind since its last named fetch (replica.lag.time.max.ms would drop
an idle in-sync follower otherwise).

The cache is bounded (`SESSION_CACHE_SLOTS`, least recently used evicted first) and holds one
session per follower: a new full request replaces the follower's previous session. A request
for a session the node does not hold answers FETCH_SESSION_ID_NOT_FOUND, one whose epoch is
not the session's next INVALID_FETCH_SESSION_EPOCH; the follower then opens a new session.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from seglog.v1 import common_pb2

from .fetch_reads import FetchChunk, FetchState
from .fetch_waits import PartitionWaiters, TopicPartition, Waiter
from .partition import now_ms

SESSION_CACHE_SLOTS = 1000  # Kafka's max.incremental.fetch.session.cache.slots
FULL_RECHECK_S = 10.0


def problem_of(
    error: Exception | None, diverging: tuple[int, int] | None
) -> tuple[str, tuple[int, int] | None] | None:
    """What a partition's answer says is wrong (its error's kind, its diverging epoch), None
    when nothing is."""
    if error is None and diverging is None:
        return None
    return ("" if error is None else type(error).__name__, diverging)


@dataclass
class SessionPartition:
    """One partition of a session: the follower's last request for it, and what it was last
    answered (-1: nothing yet, so the next round answers it)."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    client_epoch: int
    last_fetched_epoch: int
    answered_high_watermark: int = -1
    answered_log_start_offset: int = -1
    # The error or diverging epoch last answered (problem_of), None after a clean answer:
    # a problem is news once, until it changes or the partition is answered clean.
    answered_problem: tuple[str, tuple[int, int] | None] | None = None

    def wanted(self) -> tuple[str, int, int, int, int, int]:
        """As ReplicaManager.fetch_states takes it."""
        return (
            self.topic,
            self.partition,
            self.fetch_offset,
            self.max_bytes,
            self.client_epoch,
            self.last_fetched_epoch,
        )

    def has_news(self, state: FetchState) -> bool:
        if self.has_urgent_news(state):
            return True
        log = state.log
        if log is None or state.error is not None or state.diverging is not None:
            return False  # its problem was answered already
        return (
            log.high_watermark != self.answered_high_watermark
            or log.log_start_offset != self.answered_log_start_offset
        )

    def has_urgent_news(self, state: FetchState) -> bool:
        """Records to send, or an error or diverging epoch other than the last answered:
        news that answers a waiting round by itself. New watermarks alone do not (they go
        with the next answer), as Kafka's delayed fetch completes on bytes, not on the high
        mark."""
        problem = problem_of(state.error, state.diverging)
        if problem is not None:
            return problem != self.answered_problem
        log = state.log
        assert log is not None
        return state.offset < log.log_end_offset


class FetchSession(Waiter):
    def __init__(self, session_id: int, replica_id: int) -> None:
        super().__init__()
        self.id = session_id
        self.replica_id = replica_id
        self.next_epoch = 1
        self.partitions: dict[TopicPartition, SessionPartition] = {}
        self.closed = False
        self.last_used = time.monotonic()
        self.last_request_ms = now_ms()  # Partition's clock
        self.waiting = False  # a request is being answered: the follower is fetching now
        self._lock = threading.Lock()
        self._changed: set[TopicPartition] = set()
        self._all_changed = False
        self._last_full_check = time.monotonic()

    def notify(
        self, partition: TopicPartition | None, *, records: bool = True, watermark: bool = True
    ) -> None:
        with self._lock:
            if partition is None:
                self._all_changed = True
            else:
                self._changed.add(partition)
        # A new watermark alone answers no round (session_round): noted for the round's end
        # or the next records, without waking the round only to wait again.
        if records:
            super().notify(partition)

    def take_changed(self) -> set[TopicPartition]:
        """The partitions marked changed since the last call (every one, now and then)."""
        now = time.monotonic()
        with self._lock:
            self.event.clear()
            if self._all_changed or now - self._last_full_check >= FULL_RECHECK_S:
                self._all_changed = False
                self._last_full_check = now
                self._changed.clear()
                return set(self.partitions)
            changed, self._changed = self._changed, set()
        return changed

    def recheck(self, tp: TopicPartition) -> None:
        """Evaluate `tp` again next round (an answer may have left records behind)."""
        with self._lock:
            self._changed.add(tp)


@dataclass
class SessionRound:
    """One request's outcome: the session header to answer first, then the states with news."""

    session_id: int
    error: common_pb2.FetchSessionError = common_pb2.FETCH_SESSION_NONE
    states: Sequence[FetchState] = ()
    session: FetchSession | None = None

    def answered(self, chunks: Iterable[FetchChunk]) -> Iterator[FetchChunk]:
        """The chunks, remembering what each partition was answered as they are sent."""
        session = self.session
        for chunk in chunks:
            if session is not None:
                tp = (chunk.topic, chunk.partition)
                held = session.partitions.get(tp)
                if held is not None:
                    held.answered_problem = problem_of(chunk.error, chunk.diverging)
                    if held.answered_problem is None:
                        held.answered_high_watermark = chunk.high_watermark
                        held.answered_log_start_offset = chunk.log_start_offset
                    session.recheck(tp)
            yield chunk


class FetchSessionCache:
    def __init__(self, waiters: PartitionWaiters, slots: int = SESSION_CACHE_SLOTS) -> None:
        self.waiters = waiters
        self.slots = slots
        self._lock = threading.Lock()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recent first

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, replica_id: int) -> FetchSession:
        """A new session for `replica_id`, replacing its previous one."""
        with self._lock:
            closing = [s for s in self._sessions.values() if s.replica_id == replica_id]
            while len(self._sessions) - len(closing) >= self.slots:
                oldest = next(s for s in self._sessions.values() if s not in closing)
                closing.append(oldest)
            for old in closing:
                del self._sessions[old.id]
            session_id = 0
            while session_id == 0 or session_id in self._sessions:
                session_id = secrets.randbelow(1 << 31)
            session = self._sessions[session_id] = FetchSession(session_id, replica_id)
        for old in closing:
            self._close(old)
        return session

    def get(self, session_id: int, replica_id: int) -> FetchSession | None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.replica_id != replica_id:
                return None
            self._sessions.move_to_end(session_id)
            session.last_used = time.monotonic()
            return session

    def caught_up_ms(self, replica_id: int, tp: TopicPartition, offset: int) -> int | None:
        """When `replica_id` last fetched `tp` at `offset` through its session (now, while
        a request of the session is answered), or None when its session does not hold it
        there."""
        with self._lock:
            found = [s for s in self._sessions.values() if s.replica_id == replica_id]
        for session in found:
            held = session.partitions.get(tp)
            if held is not None and held.fetch_offset == offset and not session.closed:
                return now_ms() if session.waiting else session.last_request_ms
        return None

    def evict(self, session_id: int) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            self._close(session)

    def evict_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            self._close(session)

    def _close(self, session: FetchSession) -> None:
        session.closed = True
        with session._lock:
            held = list(session.partitions)
        self.waiters.unregister(session, held)
        session.notify(None)  # a round waiting on it answers now


def session_round(
    cache: FetchSessionCache,
    request: common_pb2.FetchRequest,
    replica_id: int,
    evaluate: Callable[[list[tuple[str, int, int, int, int, int]], int], list[FetchState]],
    client_epoch: Callable[[common_pb2.FetchPartition], int],
    is_active: Callable[[], bool],
) -> SessionRound:
    """Serve one session request: open or find the session, apply the request's partitions,
    and wait (up to max_wait_ms) until some of the session's partitions have news."""
    if request.session_id == 0:
        if request.session_epoch != 0:
            return SessionRound(0, common_pb2.INVALID_FETCH_SESSION_EPOCH)
        session = cache.open(replica_id)
    else:
        found = cache.get(request.session_id, replica_id)
        if found is None:
            return SessionRound(request.session_id, common_pb2.FETCH_SESSION_ID_NOT_FOUND)
        if request.session_epoch != found.next_epoch:
            return SessionRound(found.id, common_pb2.INVALID_FETCH_SESSION_EPOCH)
        session = found
        session.next_epoch += 1
    session.last_request_ms = now_ms()
    session.waiting = True
    try:
        named = _apply_request(cache, session, request, client_epoch)
        deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
        candidates = named | session.take_changed()
        # Partitions whose news is only new watermarks: answered with the first urgent news
        # or at the wait's end. A follower learns the high watermark one round late, as in
        # Kafka; an acks=all produce costs each follower one round instead of two.
        waiting_watermarks: set[TopicPartition] = set()
        while True:
            news = _news(session, candidates | waiting_watermarks, replica_id, evaluate)
            remaining = deadline - time.monotonic()
            if (
                remaining <= 0
                or session.closed
                or not is_active()
                or any(_urgent(session, state) for state in news)
            ):
                return SessionRound(session.id, states=news, session=session)
            waiting_watermarks = {(n.topic, n.partition) for n in news}
            session.event.wait(remaining)
            candidates = session.take_changed()
    finally:
        session.last_request_ms = now_ms()  # the answer is what it fetched
        session.waiting = False


def _apply_request(
    cache: FetchSessionCache,
    session: FetchSession,
    request: common_pb2.FetchRequest,
    client_epoch: Callable[[common_pb2.FetchPartition], int],
) -> set[TopicPartition]:
    forgotten = [(f.topic, f.partition) for f in request.forgotten_partitions]
    added = []
    named = set()
    with session._lock:
        for tp in forgotten:
            session.partitions.pop(tp, None)
        for p in request.partitions:
            tp = (p.topic, p.partition)
            if tp not in session.partitions:
                added.append(tp)
            session.partitions[tp] = SessionPartition(
                p.topic,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                client_epoch(p),
                p.last_fetched_epoch if p.HasField("last_fetched_epoch") else -1,
            )
            named.add(tp)
    cache.waiters.unregister(session, [tp for tp in forgotten if tp not in named])
    cache.waiters.register(session, added)
    return named


def _urgent(session: FetchSession, state: FetchState) -> bool:
    held = session.partitions.get((state.topic, state.partition))
    return held is not None and held.has_urgent_news(state)


def _news(
    session: FetchSession,
    candidates: Iterable[TopicPartition],
    replica_id: int,
    evaluate: Callable[[list[tuple[str, int, int, int, int, int]], int], list[FetchState]],
) -> list[FetchState]:
    held = [session.partitions[tp] for tp in candidates if tp in session.partitions]
    if not held:
        return []
    states = evaluate([p.wanted() for p in held], replica_id)
    return [state for p, state in zip(held, states, strict=True) if p.has_news(state)]
