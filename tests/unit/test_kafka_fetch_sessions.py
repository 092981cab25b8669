"""The Kafka listener's fetch-session cache (services/gateway/kafka/fetch_sessions.py) against
Kafka's FetchSessionCache rules: epochs, the topic-id check, and eviction (stale sessions by
last use first, then the evictable session with the fewest partitions, and only for a larger
one). The clock is the cache's own argument, so the two-minute rules need no waiting."""

from __future__ import annotations

import pytest

from services.gateway.kafka import fetch_sessions
from services.gateway.kafka.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    INVALID_FETCH_SESSION_EPOCH,
    NO_SESSION,
    CachedPartition,
    FetchSessionCache,
    FetchSessionSettings,
    PartitionFetch,
    SessionError,
)

EVICTION_MS = 120_000
FETCH = PartitionFetch(0, 1 << 20, -1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def cache(slots: int) -> tuple[FetchSessionCache, Clock]:
    clock = Clock()
    return FetchSessionCache(FetchSessionSettings(slots, EVICTION_MS), clock), clock


def partitions(count: int, topic: str = "t") -> dict[tuple[str, int], CachedPartition]:
    return {(topic, p): CachedPartition(FETCH) for p in range(count)}


def use(sessions: FetchSessionCache, session_id: int, epoch: int) -> int:
    """An incremental request changing nothing; the next epoch."""
    assert sessions.incremental(session_id, epoch, False, [], []) is not None
    return epoch + 1


def test_epochs_run_from_one_and_a_wrong_one_or_an_unknown_session_is_refused():
    sessions, _ = cache(10)
    session_id = sessions.create(False, partitions(2))
    assert session_id != NO_SESSION
    with pytest.raises(SessionError) as refused:
        sessions.incremental(session_id, 2, False, [], [])
    assert refused.value.code == INVALID_FETCH_SESSION_EPOCH
    assert use(sessions, session_id, 1) == 2  # the refusal changed nothing
    with pytest.raises(SessionError) as refused:
        sessions.incremental(session_id + 1, 2, False, [], [])
    assert refused.value.code == FETCH_SESSION_ID_NOT_FOUND
    with pytest.raises(SessionError) as refused:
        sessions.incremental(session_id, 2, True, [], [])
    assert refused.value.code == FETCH_SESSION_TOPIC_ID_ERROR


def test_forgetting_every_partition_closes_the_session():
    sessions, _ = cache(10)
    session_id = sessions.create(False, partitions(2))
    assert sessions.incremental(session_id, 1, False, [], [("t", 0), ("t", 1)]) is None
    assert sessions.session_ids() == []


def test_a_full_cache_makes_no_session_while_none_is_evictable():
    sessions, clock = cache(2)
    first, second = sessions.create(False, partitions(1)), sessions.create(False, partitions(1))
    clock.now += EVICTION_MS  # not past it: neither stale nor evictable
    assert sessions.create(False, partitions(5)) == NO_SESSION
    assert sorted(sessions.session_ids()) == sorted([first, second])


def test_the_least_recently_used_stale_session_is_evicted_first():
    sessions, clock = cache(2)
    first = sessions.create(False, partitions(9))
    clock.now += 10
    second = sessions.create(False, partitions(9))
    clock.now += 10
    use(sessions, first, 1)  # the first is now the more recently used
    clock.now += EVICTION_MS + 1
    third = sessions.create(False, partitions(1))  # smaller, but the second is stale
    assert sorted(sessions.session_ids()) == sorted([first, third])
    assert second not in sessions.session_ids() and sessions.evicted == 1


def test_an_old_session_is_evicted_only_for_a_larger_one_the_smallest_first():
    sessions, clock = cache(3)
    ids = [sessions.create(False, partitions(n)) for n in (4, 2, 3)]
    clock.now += EVICTION_MS + 1
    epochs = [use(sessions, i, 1) for i in ids]  # used when old: evictable, none stale
    assert epochs == [2, 2, 2]
    clock.now += 1
    assert sessions.create(False, partitions(2)) == NO_SESSION  # not larger than 2
    fourth = sessions.create(False, partitions(3))
    assert fourth != NO_SESSION
    assert sorted(sessions.session_ids()) == sorted([ids[0], ids[2], fourth])


def test_a_session_last_used_while_young_is_not_evictable_by_size():
    """Kafka decides evictability when a session is used (touch), not when evicting."""
    sessions, clock = cache(1)
    only = sessions.create(False, partitions(1))
    clock.now += EVICTION_MS - 10
    use(sessions, only, 1)
    clock.now += 20  # older than the eviction time now, but not when last used
    assert sessions.create(False, partitions(50)) == NO_SESSION


def test_answers_remember_what_was_said_and_records_move_a_partition_last():
    sessions, _ = cache(1)
    cached = partitions(3)
    for c in cached.values():
        c.must_answer(0, 5, 0, False)
    session_id = sessions.create(False, cached)
    continued = sessions.incremental(session_id, 1, False, [], [])
    assert continued is not None
    results = [(("t", 0), 0, 5, 0, True), (("t", 1), 0, 6, 0, False), (("t", 2), 0, 5, 0, False)]
    assert sessions.answered(continued.session, results) == [("t", 0), ("t", 1)]
    again = sessions.incremental(session_id, 2, False, [], [])
    assert again is not None and [k for k, _ in again.fetches] == [("t", 1), ("t", 2), ("t", 0)]
    # An error is answered, and the partition answered again once it is gone.
    assert sessions.answered(again.session, [(("t", 2), 6, -1, -1, False)]) == [("t", 2)]
    assert sessions.answered(again.session, [(("t", 2), 0, 5, 0, False)]) == [("t", 2)]
    assert sessions.answered(again.session, [(("t", 2), 0, 5, 0, False)]) == []


def test_a_session_answers_only_its_maker():
    sessions, _ = cache(10)
    session_id = sessions.create(False, partitions(1), "User:alice")
    with pytest.raises(SessionError) as refused:
        sessions.incremental(session_id, 1, False, [], [], "User:mallory")
    assert refused.value.code == FETCH_SESSION_ID_NOT_FOUND
    sessions.close(session_id, "User:mallory")  # not closed by another's full request
    assert sessions.incremental(session_id, 1, False, [], [], "User:alice") is not None


def test_cached_partitions_are_bounded_over_all_sessions(monkeypatch):
    monkeypatch.setattr(fetch_sessions, "MAX_CACHED_PARTITIONS", 10)
    sessions, _ = cache(10)
    first = sessions.create(False, partitions(6))
    assert sessions.create(False, partitions(5, "u")) == NO_SESSION  # 11: sessionless
    second = sessions.create(False, partitions(4, "u"))
    assert second != NO_SESSION and sessions.cached_partitions == 10
    grow = [(("v", 0), FETCH)]
    with pytest.raises(SessionError) as refused:
        sessions.incremental(second, 1, False, grow, [])
    assert refused.value.code == INVALID_FETCH_SESSION_EPOCH  # closed: start again, full
    assert sessions.session_ids() == [first] and sessions.cached_partitions == 6
    assert sessions.incremental(first, 1, False, [], [("t", 0)]) is not None
    assert sessions.cached_partitions == 5
