"""Client and coordinator parts that need no cluster: the buffer pool, the accumulator's
sender-side rounds, the assignors, the __consumer_offsets record formats, the fetcher's header
walk."""

import sys
import threading
import time

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.client.accumulator import RecordAccumulator, Settlement
from seglog.client.buffer_pool import BufferExhaustedError, BufferPool
from seglog.client.config import ConsumerConfig, ProducerConfig
from seglog.client.fetched import CompletedFetch, next_offset_after
from seglog.client.fetcher import Fetcher
from seglog.client.futures import BatchResult, BulkFuture
from seglog.client.metadata import PartitionInfo, TopicInfo
from seglog.client.structs import TopicPartition
from seglog.errors import RequestTimedOutError
from seglog.records import RecordBatchBuilder
from seglog.v1 import gateway_pb2_grpc
from services.gateway.groups.assignors import range_assign, roundrobin_assign
from services.gateway.groups.offsets_formats import (
    java_string_hash,
    partition_for_group,
)
from tests.waiting import wait_until

# -- buffer pool ---------------------------------------------------------------------------


def test_pool_reuses_batch_buffers_and_accounts_for_odd_sizes():
    pool = BufferPool(total_bytes=4096, poolable_size=1024)
    first = pool.allocate(1024, max_block_ms=0)
    pool.deallocate(first)
    assert pool.allocate(1024, max_block_ms=0) is first  # from the free list
    big = pool.allocate(2048, max_block_ms=0)  # a record larger than batch_size
    assert len(big) == 2048 and pool.available_bytes == 1024
    pool.deallocate(big)
    assert pool.available_bytes == 3072


def test_exhausted_pool_blocks_until_memory_returns_then_times_out():
    pool = BufferPool(total_bytes=2048, poolable_size=1024)
    held = [pool.allocate(1024, 0), pool.allocate(1024, 0)]
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.allocate(1024, max_block_ms=10_000)))
    waiter.start()
    assert wait_until(lambda: pool.queued_waiters == 1)
    pool.deallocate(held.pop())
    waiter.join(10)
    assert len(got) == 1 and len(got[0]) == 1024
    started_ns = time.monotonic_ns()
    with pytest.raises(BufferExhaustedError, match="after 50 ms"):
        pool.allocate(1024, max_block_ms=50)
    assert time.monotonic_ns() - started_ns >= 50_000_000
    assert pool.queued_waiters == 0


def test_a_buffer_larger_than_the_whole_pool_is_refused_at_once():
    pool = BufferPool(total_bytes=1024, poolable_size=512)
    with pytest.raises(Exception, match="larger than buffer_memory"):
        pool.allocate(4096, max_block_ms=10_000)


# -- accumulator ---------------------------------------------------------------------------


class _OneLeader:
    """The metadata the accumulator reads: every partition of every topic led by node 1."""

    def cached(self, name):
        return TopicInfo(name, tuple(PartitionInfo(p, 1, 0) for p in range(2)))


@pytest.mark.parametrize(
    ("log_append_time_ms", "error"), [(-1, None), (77, None), (-1, RequestTimedOutError("late"))]
)
def test_callbacks_get_their_records_metadata_and_the_batch_holds_no_future(
    log_append_time_ms, error
):
    config = ProducerConfig(batch_size=4096, buffer_memory=8192, linger_ms=0)
    accumulator = RecordAccumulator(
        config, BufferPool(config.buffer_memory, config.batch_size), _OneLeader()
    )
    calls = []

    def callback(name):
        return lambda metadata, exc: calls.append((name, metadata, exc))

    accumulator.append("t", 0, None, b"a", 1000, None, callback("a"))  # opens the batch
    assert accumulator.try_append("t", 0, None, b"b", 1001, None, None) is not None
    c = accumulator.try_append("t", 0, b"k", b"c", 1002, [("h", b"v")], callback("c"))
    assert sys.getrefcount(c) == 2  # this test's reference alone (and getrefcount's argument)
    (plan,) = accumulator.drain(1, time.monotonic())
    (batch,) = plan.batches[0]
    assert batch.callbacks[:2] == [0, 1000] and batch.callbacks[3:5] == [2, 1002]
    batch.complete(40, log_append_time_ms, error)
    if error is not None:
        assert calls == [("a", None, error), ("c", None, error)]
    else:
        stamp = [1000, 1002] if log_append_time_ms < 0 else [77, 77]
        assert calls == [
            ("a", ("t", 0, 40, stamp[0]), None),
            ("c", ("t", 0, 42, stamp[1]), None),
        ]
        assert c.get(timeout=0) == ("t", 0, 42, stamp[1])  # the future agrees
    assert batch.callbacks == []


def test_a_settlement_requeues_retries_in_order_before_unmuting_and_returns_buffers():
    config = ProducerConfig(batch_size=256, buffer_memory=4096, linger_ms=0, retry_backoff_ms=50)
    pool = BufferPool(config.buffer_memory, config.batch_size)
    accumulator = RecordAccumulator(config, pool, _OneLeader())
    futures = [accumulator.append("t", 0, None, b"x" * 150, i, None, None) for i in range(3)]
    now = time.monotonic()
    assert accumulator.ready(now).nodes == {1}
    (plan,) = accumulator.drain(1, now)
    first, second, third = plan.batches[0]
    assert accumulator.ready(now).nodes == set()  # muted: its request is in flight
    first.complete(0, -1, None)
    settled = Settlement(completed=[first], retries=[second, third], unmuted=[("t", 0)])
    check = accumulator.ready(now, settled)
    assert pool.available_bytes == 4096 - 2 * 256  # the completed batch's buffer is back
    assert check.nodes == set() and check.wait_s > 0  # backing off before the retry
    # The backoff is retry_backoff_ms; compared in whole milliseconds, since (now + 0.05) - now
    # is not 0.05 in floating point for every value of the clock.
    assert round(check.wait_s * 1000) == 50
    assert accumulator.ready(now + check.wait_s / 2).nodes == set()
    later = now + check.wait_s  # exact: the difference of two close floats is representable
    assert accumulator.ready(later).nodes == {1}
    (retry,) = accumulator.drain(1, later)
    assert retry.batches[0] == [second, third]  # in their order, ahead of anything newer
    assert [batch.attempts for batch in (second, third)] == [1, 1]
    assert futures[0].get(timeout=0).offset == 0 and not futures[1].done()


def test_an_idempotent_producer_retries_each_batch_alone_oldest_first():
    """A retried batch's first attempt may have landed in part (issue 26): each goes in a
    request of its own, before anything newer; new batches share requests again after."""
    config = ProducerConfig(batch_size=256, buffer_memory=1 << 16, linger_ms=0)
    assert config.enable_idempotence
    accumulator = RecordAccumulator(config, BufferPool(config.buffer_memory, 256), _OneLeader())
    for i in range(8):
        accumulator.append("t", 0, None, b"x" * 150, i, None, None)
    now = time.monotonic()
    (plan,) = accumulator.drain(1, now)
    sent = plan.batches[0]
    assert len(sent) == 8  # new batches share a request
    for sequence, batch in enumerate(sent):
        batch.stamp_producer(7, 0, sequence)
    accumulator.ready(now, Settlement(retries=sent, unmuted=[("t", 0)]))
    for i in range(3):  # three newer batches, queued behind the retries
        accumulator.append("t", 0, None, b"y" * 150, i, None, None)
    later = now + 1
    for expected in sent:  # one request each, in sequence order
        (retry,) = accumulator.drain(1, later)
        assert retry.batches[0] == [expected]
        accumulator.ready(later, Settlement(completed=[expected], unmuted=[("t", 0)]))
    (rest,) = accumulator.drain(1, later)
    assert len(rest.batches[0]) == 3 and not set(rest.batches[0]) & set(sent)


def test_a_producer_without_idempotence_sends_what_fits_in_one_request():
    config = ProducerConfig(batch_size=256, buffer_memory=1 << 16, linger_ms=0, acks=1)
    assert not config.enable_idempotence
    accumulator = RecordAccumulator(config, BufferPool(config.buffer_memory, 256), _OneLeader())
    for i in range(8):
        accumulator.append("t", 0, None, b"x" * 150, i, None, None)
    (plan,) = accumulator.drain(1, time.monotonic())
    assert len(plan.batches[0]) == 8


class _DrainOnRelease:
    """The accumulator's lock, with a sender that drains in a hurry (a flush in progress)
    each time the caller lets the lock go: every window a real sender could use."""

    def __init__(self, accumulator):
        self.lock = threading.Lock()
        self.accumulator = accumulator
        self.drained = []
        self.errors = []
        self._in_sender = False

    def __enter__(self):
        self.lock.acquire()

    def __exit__(self, *exc):
        self.lock.release()
        if not self._in_sender:  # the sender's own use of the lock drains nothing more
            self._in_sender = True
            sender = threading.Thread(target=self._drain)
            sender.start()
            sender.join()
            self._in_sender = False

    def _drain(self):
        try:
            self.drained += self.accumulator.drain(1, time.monotonic())
        except Exception as exc:  # recorded for the test
            self.errors.append(exc)


def test_a_sender_draining_between_bulk_appends_never_finds_an_empty_batch():
    config = ProducerConfig(batch_size=256, buffer_memory=1 << 20, linger_ms=60_000)
    accumulator = RecordAccumulator(config, BufferPool(config.buffer_memory, 256), _OneLeader())
    accumulator._flushes_in_progress = 1  # the sender takes open batches at once
    hooked = _DrainOnRelease(accumulator)
    accumulator._lock = hooked
    bulk = BulkFuture("t")
    accumulator.append_many("t", 0, [b"x" * 100] * 20, None, 1000, bulk)
    assert hooked.errors == []
    batches = [b for plan in hooked.drained for bs in plan.batches.values() for b in bs]
    assert batches and all(b.record_count > 0 for b in batches)
    waiting = [b for dq in accumulator._batches.values() for b in dq]
    counts = [b.record_count if b.builder is None else b.builder.record_count for b in waiting]
    assert sum(b.record_count for b in batches) + sum(counts) == 20


def test_ready_takes_out_batches_past_the_delivery_timeout():
    config = ProducerConfig(linger_ms=60_000, delivery_timeout_ms=90_000)
    accumulator = RecordAccumulator(
        config, BufferPool(config.buffer_memory, config.batch_size), _OneLeader()
    )
    accumulator.append("t", 1, None, b"late", 0, None, None)
    now = time.monotonic()
    check = accumulator.ready(now)
    assert (check.nodes, check.expired, check.queued_topics) == (set(), [], {"t"})
    check = accumulator.ready(now + 90)
    assert [(b.topic, b.partition, b.record_count) for b in check.expired] == [("t", 1, 1)]
    assert not accumulator.has_undrained()


def test_batch_result_wakes_waiters_from_before_and_answers_those_after_at_once():
    result = BatchResult()
    woken = []
    waiters = [
        threading.Thread(target=lambda: woken.append(result.wait(timeout_s=10) or "ok"))
        for _ in range(3)
    ]
    for waiter in waiters:
        waiter.start()
    with pytest.raises(TimeoutError, match="within 0.01 s"):
        result.wait(timeout_s=0.01)
    assert not result.is_done()
    result.set(7, -1, None)
    for waiter in waiters:
        waiter.join(10)
    assert woken == ["ok"] * 3 and result.is_done()
    result.wait(timeout_s=0)  # done: no waiting at all
    failed = BatchResult()
    failed.set(-1, -1, RequestTimedOutError("expired"))
    with pytest.raises(RequestTimedOutError, match="expired"):
        failed.wait(timeout_s=None)


# -- assignors -----------------------------------------------------------------------------


def test_range_gives_contiguous_runs_extra_partitions_first():
    subscriptions = {"c": ("t",), "a": ("t", "u"), "b": ("t",)}
    assert range_assign(subscriptions, {"t": 7, "u": 2}) == {
        "a": {"t": [0, 1, 2], "u": [0, 1]},
        "b": {"t": [3, 4]},
        "c": {"t": [5, 6]},
    }


def test_roundrobin_deals_partitions_skipping_unsubscribed_members():
    subscriptions = {"a": ("t", "u"), "b": ("t",)}
    assert roundrobin_assign(subscriptions, {"t": 3, "u": 2}) == {
        "a": {"t": [0, 2], "u": [0, 1]},
        "b": {"t": [1]},
    }


@given(
    members=st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=6, unique=True),
    counts=st.lists(st.integers(0, 20), min_size=1, max_size=3),
    strategy=st.sampled_from([range_assign, roundrobin_assign]),
)
def test_every_partition_goes_to_exactly_one_member(members, counts, strategy):
    partitions = {f"t{i}": n for i, n in enumerate(counts)}
    subscriptions = {m: tuple(partitions) for m in members}
    assignment = strategy(subscriptions, partitions)
    owned = [(t, p) for topics in assignment.values() for t, ps in topics.items() for p in ps]
    assert sorted(owned) == sorted((t, p) for t, n in partitions.items() for p in range(n))
    sizes = [sum(len(ps) for ps in topics.values()) for topics in assignment.values()]
    if strategy is roundrobin_assign:
        assert max(sizes) - min(sizes) <= 1


# -- __consumer_offsets formats --------------------------------------------------------------


def test_group_partition_uses_javas_string_hash_and_kafkas_abs():
    assert java_string_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_string_hash("") == 0
    # Java's famous Integer.MIN_VALUE hash: Kafka's Utils.abs maps it to 0, not to itself.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50


# -- fetcher -------------------------------------------------------------------------------


def test_next_offset_is_read_from_the_last_whole_batch():
    first = RecordBatchBuilder(base_offset=10)
    for i in range(3):
        first.append(None, b"%d" % i, 0)
    second = RecordBatchBuilder(base_offset=13)
    second.append(None, b"x", 0)
    data = first.build() + second.build()
    assert next_offset_after(data, 10) == 14
    assert next_offset_after(data[:-5], 10) == 13  # a cut-off batch is not counted
    assert next_offset_after(b"", 7) == 7


# -- fetcher -------------------------------------------------------------------------------


def test_data_fetched_before_a_rebalance_is_dropped_when_the_partition_comes_back():
    """A partition revoked and assigned again starts at the committed offset; records fetched
    for its previous assignment (from where that one had read to) must not be handed out
    after it, or the consumer's reads go backwards (found by the fault campaign)."""
    config = ConsumerConfig(group_id="g")
    channel = grpc.insecure_channel("127.0.0.1:1")  # never called: nothing has a fetch offset
    fetcher = Fetcher(config, gateway_pb2_grpc.GatewayStub(channel))
    try:
        tp = TopicPartition("t", 0)
        fetcher.assign({tp})
        before = fetcher.states[tp].epoch
        builder = RecordBatchBuilder(base_offset=40590)
        builder.append(None, b"fetched for the old assignment", 0)
        data = builder.build()
        fetcher.assign(set())  # the rebalance: revoked ...
        fetcher.assign({tp})  # ... and assigned again
        with fetcher._lock:  # the old assignment's fetch lands now
            fetcher._completed.append(CompletedFetch(tp, before, data, 40591))
            fetcher._buffered_bytes += len(data)
            fetcher.states[tp].position = 18098  # the committed offset
        assert fetcher.collect(100) == []
    finally:
        fetcher.close()
        channel.close()
