"""Per-partition wake-ups (services/storage_node/fetch_waits.py) on a real replica manager and
logs: an append to P wakes only what waits on P; the leader's side of a fetch session
(fetch_sessions.py): what each round answers; and the follower's side (follower_session.py,
replica_fetcher.py): what each request names."""

from __future__ import annotations

import threading

import pytest

from seglog.rpc import client_leader_epoch
from seglog.storage import LogConfig
from seglog.storage.config import LogManagerConfig
from seglog.storage.log_manager import LogManager
from seglog.v1 import common_pb2
from services.storage_node.fetch_sessions import FetchSessionCache
from services.storage_node.fetch_waits import PartitionWaiters, Waiter
from services.storage_node.follower_session import FollowerSession, PartitionFetch
from services.storage_node.partition import Registration
from services.storage_node.replica_fetcher import FetcherSettings, ReplicaFetcher
from services.storage_node.replica_manager import ReplicaManager
from tests.batches import make_batch
from tests.waiting import wait_until


@pytest.fixture
def replicas(tmp_path):
    logs = LogManager(LogManagerConfig(log_dirs=(str(tmp_path),)), LogConfig())
    logs.startup()
    manager = ReplicaManager(logs, node_id=1)
    for partition in (0, 1):
        manager.host_as_sole_leader("t", partition, 0, {})
    yield manager
    manager.stop()
    logs.shutdown()


def _long_poll(replicas, partition, waiter):
    [state] = replicas.fetch_states([("t", partition, 0, 1 << 20, -1, -1)])
    thread = threading.Thread(
        target=replicas.wait_for_fetch, args=([state], 1, 30_000, lambda: True, waiter)
    )
    thread.start()
    return thread


def test_an_append_wakes_only_the_fetches_waiting_on_its_partition(replicas):
    waiters = {0: Waiter(), 1: Waiter()}
    polls = {p: _long_poll(replicas, p, waiters[p]) for p in (0, 1)}
    assert wait_until(lambda: all(replicas.waiters.waiting_on(("t", p)) == 1 for p in (0, 1)))
    replicas.append("t", [(0, make_batch([b"x"]), -1)])
    polls[0].join(timeout=10)
    assert not polls[0].is_alive()  # its records are there: the long poll answered
    assert waiters[0].wakeups >= 1
    assert waiters[1].wakeups == 0 and polls[1].is_alive()
    replicas.append("t", [(1, make_batch([b"y"]), -1)])
    polls[1].join(timeout=10)
    assert not polls[1].is_alive()
    assert replicas.waiters.waiting_on(("t", 0)) == replicas.waiters.waiting_on(("t", 1)) == 0


def _session_round(replicas, session_id, epoch, partitions=()):
    request = common_pb2.FetchRequest(
        replica_id=2, session_id=session_id, session_epoch=epoch, max_wait_ms=0
    )
    for partition in partitions:
        request.partitions.add(
            topic="t", partition=partition, partition_max_bytes=1 << 20, current_leader_epoch=0
        )
    found = replicas.session_fetch(request, client_leader_epoch, lambda: True)
    answered = list(found.answered(replicas.read_chunks(list(found.states), 1 << 20)))
    return found, sorted(chunk.partition for chunk in answered)


def test_a_fetch_session_answers_only_the_partitions_with_news(replicas):
    for partition in (0, 1):  # node 2 follows, outside the ISR
        replicas.apply_state("t", partition, {}, Registration(1, 0, 1, (1, 2), (1,)))
    found, answered = _session_round(replicas, 0, 0, (0, 1))
    assert found.error == common_pb2.FETCH_SESSION_NONE and answered == [0, 1]
    assert all(state.error is None for state in found.states)
    session = found.session
    assert _session_round(replicas, session.id, 1)[1] == []  # idle
    wakeups = session.wakeups
    replicas.append("t", [(1, make_batch([b"x"]), -1)])
    assert session.wakeups > wakeups
    assert _session_round(replicas, session.id, 2)[1] == [1]  # only the appended one
    assert _session_round(replicas, session.id, 2)[0].error == (
        common_pb2.INVALID_FETCH_SESSION_EPOCH
    )
    replicas.fetch_sessions.evict_all()  # as the bounded cache evicts
    assert session.closed and replicas.waiters.waiting_on(("t", 1)) == 0
    assert _session_round(replicas, session.id, 3)[0].error == (
        common_pb2.FETCH_SESSION_ID_NOT_FOUND
    )


def test_a_session_answers_each_new_problem_once_even_after_a_clean_answer(replicas):
    # The leader's session answers an error once, not every round (the follower backs off),
    # but once a clean answer went out the next error is news again, whatever its kind.
    def round_(session_id, epoch, name=False):
        request = common_pb2.FetchRequest(
            replica_id=2, session_id=session_id, session_epoch=epoch, max_wait_ms=0
        )
        if name:  # no current_leader_epoch: only leadership itself is checked
            request.partitions.add(topic="t", partition=0, partition_max_bytes=1 << 20)
        found = replicas.session_fetch(request, client_leader_epoch, lambda: True)
        chunks = list(found.answered(replicas.read_chunks(list(found.states), 1 << 20)))
        return found, [type(chunk.error).__name__ for chunk in chunks]

    def lead(leader_epoch):
        registration = Registration(1, leader_epoch, leader_epoch, (1, 2), (1,))
        replicas.apply_state("t", 0, {}, registration)

    def follow(leader_epoch):  # node 3 leads: this node answers no fetch for it
        registration = Registration(3, leader_epoch, leader_epoch, (1, 2, 3), (3,))
        replicas.apply_state("t", 0, {}, registration)

    lead(1)
    found, answered = round_(0, 0, name=True)
    assert answered == ["NoneType"]
    session_id = found.session.id
    follow(2)
    assert round_(session_id, 1)[1] == ["NotLeaderError"]
    assert round_(session_id, 2)[1] == []  # told once
    lead(3)
    replicas.append("t", [(0, make_batch([b"x"]), -1)])
    assert round_(session_id, 3)[1] == ["NoneType"]  # the record: a clean answer
    follow(4)
    assert round_(session_id, 4)[1] == ["NotLeaderError"]  # news again


def _request(session, ready, changed):
    request = common_pb2.FetchRequest(replica_id=2)
    asked = session.fill(request, ready, changed, 1 << 20)
    named = {(p.topic, p.partition): p.fetch_offset for p in request.partitions}
    forgotten = {(f.topic, f.partition) for f in request.forgotten_partitions}
    return asked, request.session_id, request.session_epoch, named, forgotten


def test_the_follower_names_everything_once_then_only_what_changed():
    a, b = ("t", 0), ("t", 1)
    ready = {a: PartitionFetch(5, 0, 0, 0), b: PartitionFetch(7, 0, 0, 0)}
    session = FollowerSession()
    assert _request(session, ready, set()) == (True, 0, 0, {a: 5, b: 7}, set())
    assert session.header(42, common_pb2.FETCH_SESSION_NONE)
    session.answered()
    # Idle: the answers touched both, but neither fetch state changed.
    assert _request(session, ready, {a, b}) == (True, 42, 1, {}, set())
    session.answered()
    ready[a] = PartitionFetch(9, 0, 0, 0)  # records appended
    assert _request(session, {a: ready[a]}, {a, b}) == (True, 42, 2, {a: 9}, {b})
    # A lost answer: the session is dropped and the next request is full again.
    session.reset()
    assert _request(session, ready, set()) == (True, 0, 0, {a: 9, b: 7}, set())
    assert not session.header(42, common_pb2.FETCH_SESSION_ID_NOT_FOUND)
    assert not session.is_open


def test_a_follower_names_again_a_partition_whose_answer_it_dropped(replicas):
    # The leader answers a diverging epoch once and remembers it. An answer that arrives for
    # an entry this follower has replaced since (the registration was applied again at the
    # same leader epoch: an ISR change) is dropped; the next request names the partition
    # again, so the leader answers afresh. Else the follower would wait for it forever.
    replicas.apply_state("t", 0, {}, Registration(3, 1, 1, (1, 3), (1, 3)))  # 3 leads
    held = replicas.partition("t", 0)
    fetcher = ReplicaFetcher(1, 3, "127.0.0.1:9", FetcherSettings())  # never started
    try:
        fetcher.add_partition(held)
        request, followed = fetcher._build_request()
        assert [(p.topic, p.partition) for p in request.partitions] == [("t", 0)]
        assert fetcher._session.header(42, common_pb2.FETCH_SESSION_NONE)
        fetcher._session.answered()
        fetcher.add_partition(held)  # the same term, a new entry
        request, _ = fetcher._build_request()
        assert request is not None and not request.partitions  # nothing new to name
        diverging = common_pb2.FetchResponse(
            topic="t", partition=0, diverging_epoch=0, diverging_end_offset=0
        )
        fetcher._apply(diverging, b"", followed)  # for the replaced entry: dropped
        request, _ = fetcher._build_request()
        assert [(p.topic, p.partition) for p in request.partitions] == [("t", 0)]
    finally:
        fetcher.shutdown()


def test_a_follower_left_with_nothing_to_fetch_does_not_wait_at_the_leader(replicas):
    # A partition backing off after an error is forgotten by the session; with nothing else
    # to fetch, waiting at the leader would hold up naming it again when its backoff ends.
    replicas.apply_state("t", 0, {}, Registration(3, 1, 1, (1, 3), (1, 3)))
    fetcher = ReplicaFetcher(1, 3, "127.0.0.1:9", FetcherSettings())  # never started
    try:
        fetcher.add_partition(replicas.partition("t", 0))
        request, followed = fetcher._build_request()
        assert request.max_wait_ms == 500 and len(request.partitions) == 1
        assert fetcher._session.header(42, common_pb2.FETCH_SESSION_NONE)
        fetcher._session.answered()
        error = common_pb2.FetchResponse(
            topic="t", partition=0, error=common_pb2.NOT_LEADER_OR_FOLLOWER
        )
        fetcher._apply(error, b"", followed)  # backs off
        request, _ = fetcher._build_request()
        assert [(f.topic, f.partition) for f in request.forgotten_partitions] == [("t", 0)]
        assert request.max_wait_ms == 0
    finally:
        fetcher.shutdown()


def test_the_session_cache_is_bounded_and_holds_one_session_per_follower():
    cache = FetchSessionCache(PartitionWaiters(), slots=2)
    first, second = cache.open(2), cache.open(3)
    assert cache.get(first.id, 2) is first  # now the most recently used
    third = cache.open(4)  # full: the least recently used goes
    assert second.closed and cache.get(second.id, 3) is None
    assert cache.get(first.id, 2) is first and cache.get(third.id, 4) is third
    again = cache.open(2)  # a follower's new full request replaces its session
    assert first.closed and cache.get(again.id, 2) is again and len(cache) == 2
    assert cache.get(again.id, 3) is None  # another follower cannot use it


def test_a_moved_watermark_wakes_long_polls_and_appends_but_only_marks_sessions():
    waiters = PartitionWaiters()
    cache = FetchSessionCache(waiters)
    session = cache.open(replica_id=2)
    watermark_wait = Waiter(wakes_on_records=False)  # a consumer's long poll, acks=all
    tp = ("t", 0)
    waiters.register(session, [tp, ("t", 1)])
    waiters.register(watermark_wait, [tp])
    session.take_changed()  # what opening the session marked
    # Records that did not move the watermark: the session is woken, the others are not.
    waiters.wake(tp, watermark=False)
    assert session.event.is_set() and session.take_changed() == {tp}
    assert not watermark_wait.event.is_set() and watermark_wait.wakeups == 0
    # Only the watermark: the others are woken; a session is answered for records, so it
    # only notes the partition for its next answer (or its wait's end).
    waiters.wake(tp, records=False)
    assert watermark_wait.event.is_set() and watermark_wait.wakeups == 1
    assert not session.event.is_set() and session.take_changed() == {tp}
    # Anything else wakes everything.
    waiters.wake(tp)
    assert session.event.is_set() and watermark_wait.wakeups == 2


def test_a_consumers_long_poll_sleeps_through_appends_until_the_watermark_moves(replicas):
    replicas.apply_state("t", 0, {}, Registration(1, 0, 1, (1, 2), (1, 2)))  # 2 in the ISR
    poll = _long_poll(replicas, 0, None)
    assert wait_until(lambda: replicas.waiters.waiting_on(("t", 0)) == 1)
    [waiter] = replicas.waiters._by_partition[("t", 0)]
    replicas.append("t", [(0, make_batch([b"x"]), -1)])
    # The record is not readable below the high watermark yet: the poll was not even woken.
    assert waiter.wakeups == 0 and poll.is_alive()
    # Follower 2 fetches past it: the watermark moves and the poll answers.
    replicas.fetch_states([("t", 0, 1, 1 << 20, 0, 0)], replica_id=2)
    poll.join(timeout=10)
    assert not poll.is_alive() and waiter.wakeups >= 1
