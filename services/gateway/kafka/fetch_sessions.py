"""Kafka's fetch sessions for clients (KIP-227), as its broker keeps them (FetchSession.scala:
FetchManager.newContext, FetchSessionCache): a session remembers the partitions a consumer
fetches and what it was last told of each, so the consumer's next request names only what
changed (an incremental fetch) and the answer holds only partitions with something new.

One cache per Kafka listener (KafkaListener builds it): a client's session is with the broker
it fetches from, and with several gateways each gateway's listener keeps its own sessions (a
client that moves to another gateway's lane is answered FETCH_SESSION_ID_NOT_FOUND there and
opens a new session with a full request, as with a Kafka broker that restarted).

A request's (session_id, session_epoch):
- epoch -1 (FINAL): sessionless; a session it names is closed.
- epoch 0 (INITIAL): a full request; a session it names is closed, and a new one is made when
  the cache has a slot (or can evict one), else the answer says session id 0 (sessionless).
- anything else: an incremental request to the named session. No such session:
  FETCH_SESSION_ID_NOT_FOUND; an epoch other than the session's: INVALID_FETCH_SESSION_EPOCH;
  a session made with topic ids (v13+) used by a request without (or the other way):
  FETCH_SESSION_TOPIC_ID_ERROR. Otherwise its partitions are added or updated, the forgotten
  ones removed (a session left empty is closed, the answer sessionless), and the epoch moves
  on (1 after INITIAL, wrapping from 2^31-1 to 1).

Eviction (FetchSessionCache.tryEvict): a full request finding the cache full evicts the least
recently used session if it was not used for `min_incremental_fetch_session_eviction_ms`;
else the evictable session with the fewest partitions (evictable: already that old when last
used; its size as of then; among equals the lowest id) when the new one has strictly more.
All sessions here are consumers' (Kafka's privileged follower sessions replicate between
storage nodes, on their own protocol), so none is privileged.

Partitions are keyed by (topic, partition), the topic being its id (Kafka's string form) in a
session with topic ids, else its name.

Bounds (anything a client sends is bounded): the sessions together hold at most
MAX_CACHED_PARTITIONS partitions (Kafka's broker has no such bound; a request of 100 MiB could
name millions). A full request past it gets no session (its answer is whole, sessionless), an
incremental one that would take a session past it closes the session
(INVALID_FETCH_SESSION_EPOCH: the client starts again with a full request), so a consumer of
more partitions is served as without sessions. A session is its maker's: a request of another
principal naming it is answered FETCH_SESSION_ID_NOT_FOUND (Kafka's broker does not check;
ids are random 31-bit numbers, this takes guessing out altogether).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
NO_OFFSET = -1
_MAX_EPOCH = 2**31 - 1
# About 250 bytes each cached (key, entry and request): 200,000 are ~50 MB at most, ten
# times the gateway's default max.partitions (20,000) for a session of every partition.
MAX_CACHED_PARTITIONS = 200_000

PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class FetchSessionSettings:
    """The fetch-session cache's bounds, under Kafka's names."""

    # Kafka's max.incremental.fetch.session.cache.slots (default 1000).
    max_incremental_fetch_session_cache_slots: int = 1000
    # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS (a constant there, 2 minutes): a
    # session is evictable once this old, and stale once unused this long.
    min_incremental_fetch_session_eviction_ms: int = 120_000

    def __post_init__(self) -> None:
        if self.max_incremental_fetch_session_cache_slots < 0:
            raise ValueError("max.incremental.fetch.session.cache.slots must be at least 0")
        if self.min_incremental_fetch_session_eviction_ms < 0:
            raise ValueError("the fetch session eviction time must be at least 0")


class PartitionFetch(NamedTuple):
    """What a request asks of one partition."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int


class CachedPartition:
    """A session's partition: what the client last asked, and what it was last told."""

    __slots__ = ("fetch", "high_watermark", "log_start_offset")

    def __init__(self, fetch: PartitionFetch) -> None:
        self.fetch = fetch
        self.high_watermark = NO_OFFSET
        self.log_start_offset = NO_OFFSET

    def must_answer(
        self, error: int, high_watermark: int, log_start_offset: int, has_records: bool
    ) -> bool:
        """Whether an incremental answer includes the partition, remembering what it says
        (CachedPartition.maybeUpdateResponseData): records, a changed high watermark or log
        start, or an error (after which the watermark is forgotten, so the partition is
        answered again once the error is gone)."""
        answer = has_records or error != 0
        if self.high_watermark != high_watermark:
            answer = True
            self.high_watermark = high_watermark
        if self.log_start_offset != log_start_offset:
            answer = True
            self.log_start_offset = log_start_offset
        if error != 0:
            self.high_watermark = NO_OFFSET
        return answer


class FetchSession:
    def __init__(
        self,
        session_id: int,
        owner: str,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
        now_ms: int,
    ) -> None:
        self.id = session_id
        self.owner = owner  # the principal that made it
        self.uses_topic_ids = uses_topic_ids
        # In fetch order: a partition that answered records moves to the end, so the answer's
        # byte budget goes round the partitions (Kafka's PartitionIterator).
        self.partitions = partitions
        self.epoch = _next_epoch(INITIAL_EPOCH)
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        # As of the last use (FetchSessionCache.touch): whether the session was then old
        # enough to be evicted for a larger one, and its size then.
        self.evictable = False
        self.evictable_size = len(partitions)

    def touch(self, now_ms: int, eviction_ms: int) -> None:
        self.last_used_ms = now_ms
        self.evictable = now_ms - self.created_ms > eviction_ms
        self.evictable_size = len(self.partitions)

    def update(
        self,
        fetches: Iterable[tuple[PartitionKey, PartitionFetch]],
        forgotten: Iterable[PartitionKey],
    ) -> None:
        for key, fetch in fetches:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(fetch)
            else:
                cached.fetch = fetch
        for key in forgotten:
            self.partitions.pop(key, None)

    def answered_records(self, key: PartitionKey) -> None:
        cached = self.partitions.pop(key, None)
        if cached is not None:
            self.partitions[key] = cached


class Continued(NamedTuple):
    """An incremental request's session, and the partitions it fetches (in session order,
    as of the request: other connections may use the session meanwhile)."""

    session: FetchSession
    fetches: list[tuple[PartitionKey, PartitionFetch]]


class SessionError(Exception):
    """An incremental request the cache cannot serve: `code` is the answer's error code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# Kafka's codes for the session errors (Errors.java).
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106


def _next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH  # FetchMetadata.nextEpoch: the final epoch stays final
    return 1 if epoch == _MAX_EPOCH else epoch + 1


class FetchSessionCache:
    """The sessions of one listener, bounded by the settings' slots. Thread-safe: requests
    of several connections use it at once."""

    def __init__(
        self,
        settings: FetchSessionSettings | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings or FetchSessionSettings()
        self._clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self._lock = threading.Lock()
        self._sessions: dict[int, FetchSession] = {}
        self._random = random.Random()
        self._cached = 0  # partitions held by all sessions
        # Counters (since start), for metrics and tests.
        self.created = 0
        self.created_with_topic_ids = 0
        self.evicted = 0
        self.incremental_requests = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def session_ids(self) -> list[int]:
        with self._lock:
            return list(self._sessions)

    def close(self, session_id: int, owner: str = "") -> None:
        """A full or sessionless request naming a session (its maker's) ends it."""
        if session_id != NO_SESSION:
            with self._lock:
                session = self._sessions.get(session_id)
                if session is not None and session.owner == owner:
                    self._drop(session)

    @property
    def cached_partitions(self) -> int:
        return self._cached

    def incremental(
        self,
        session_id: int,
        epoch: int,
        uses_topic_ids: bool,
        fetches: list[tuple[PartitionKey, PartitionFetch]],
        forgotten: list[PartitionKey],
        owner: str = "",
    ) -> Continued | None:
        """The session an incremental request continues, updated and its epoch moved on;
        None when the request left it empty (it is then closed). Raises SessionError."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.owner != owner:
                raise SessionError(FETCH_SESSION_ID_NOT_FOUND)
            if session.epoch != epoch:
                raise SessionError(INVALID_FETCH_SESSION_EPOCH)
            if session.uses_topic_ids != uses_topic_ids:
                raise SessionError(FETCH_SESSION_TOPIC_ID_ERROR)
            before = len(session.partitions)
            session.update(fetches, forgotten)
            self._cached += len(session.partitions) - before
            if not session.partitions:
                self._drop(session)
                return None
            if self._cached > MAX_CACHED_PARTITIONS:
                # Past the bound: the session ends, the client starts again with a full
                # request (it takes INVALID_FETCH_SESSION_EPOCH as "close and start anew").
                self._drop(session)
                raise SessionError(INVALID_FETCH_SESSION_EPOCH)
            session.touch(self._clock_ms(), self.settings.min_incremental_fetch_session_eviction_ms)
            session.epoch = _next_epoch(session.epoch)
            self.incremental_requests += 1
            return Continued(session, [(k, c.fetch) for k, c in session.partitions.items()])

    def answered(
        self,
        session: FetchSession,
        results: Iterable[tuple[PartitionKey, int, int, int, bool]],
    ) -> list[PartitionKey]:
        """The partitions an incremental answer holds, of each partition's (key, error,
        high watermark, log start offset, has records): those that must answer (their news
        remembered), in fetch order; those with records move to the session's end."""
        answered = []
        with self._lock:
            for key, error, high_watermark, log_start_offset, has_records in results:
                cached = session.partitions.get(key)
                if cached is None:  # forgotten by a request meanwhile
                    continue
                if cached.must_answer(error, high_watermark, log_start_offset, has_records):
                    answered.append(key)
                    if has_records:
                        session.answered_records(key)
        return answered

    def create(
        self,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
        owner: str = "",
    ) -> int:
        """A new session for a full request's partitions (their answers already cached in
        them) made by `owner`; its id, or NO_SESSION when the cache is full and nothing can
        be evicted, or the partitions are past the bound."""
        with self._lock:
            if self._cached + len(partitions) > MAX_CACHED_PARTITIONS:
                return NO_SESSION
            now = self._clock_ms()
            full = len(self._sessions) >= self.settings.max_incremental_fetch_session_cache_slots
            if full and not self._try_evict(len(partitions), now):
                return NO_SESSION
            session_id = self._new_id()
            self._sessions[session_id] = FetchSession(
                session_id, owner, uses_topic_ids, partitions, now
            )
            self._cached += len(partitions)
            self.created += 1
            self.created_with_topic_ids += uses_topic_ids
            return session_id

    def _try_evict(self, size: int, now: int) -> bool:
        if not self._sessions:
            return False
        eviction_ms = self.settings.min_incremental_fetch_session_eviction_ms
        stale = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > eviction_ms:
            return self._evict(stale)
        evictable = [s for s in self._sessions.values() if s.evictable]
        if not evictable:
            return False
        smallest = min(evictable, key=lambda s: (s.evictable_size, s.id))
        # EvictableKey(privileged=false, size, id=0) against the smallest: only a strictly
        # larger new session wins (id 0 sorts below every session's id).
        if size <= smallest.evictable_size:
            return False
        return self._evict(smallest)

    def _evict(self, session: FetchSession) -> bool:
        self._drop(session)
        self.evicted += 1
        return True

    def _drop(self, session: FetchSession) -> None:
        del self._sessions[session.id]
        self._cached -= len(session.partitions)

    def _new_id(self) -> int:
        while True:
            session_id = self._random.randint(1, _MAX_EPOCH)
            if session_id not in self._sessions:
                return session_id
