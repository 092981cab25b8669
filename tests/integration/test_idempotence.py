"""The idempotent producer end to end on a real cluster: producer ids from the gateway,
sequences on every batch, a retry after a lost answer written once, a retry at a new leader
after failover written once, gaps refused with nothing written."""

from __future__ import annotations

import dataclasses
import time

import pytest

from seglog.client.producer import Producer
from seglog.errors import (
    InvalidRequestError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
    SeglogError,
)
from seglog.records import RecordBatchBuilder
from seglog.records.batch import RecordBatch
from seglog.rpc.status import error_from_code
from seglog.v1 import gateway_pb2
from services.storage_node.delayed_produce import AppendResult
from tests.cluster import LocalCluster
from tests.waiting import wait_until

FAST = {"replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100"}


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=3, node_configs=FAST)
    yield c
    c.close()


def idempotent_batch(producer_id, sequence, values, epoch=0):
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )
    now = time.time_ns() // 1_000_000
    for value in values:
        builder.append(None, value, now)
    return builder.build()


def _batches(log):
    data, pos, out = log.read(0, 1 << 24), 0, []
    view = memoryview(data)
    while pos < len(view):
        batch = RecordBatch(view[pos:])
        out.append(batch)
        pos += batch.size_in_bytes
    return out


def test_producer_ids_are_unique_durable_and_transactions_are_refused(cluster):
    first = cluster.client.init_producer_id()
    second = cluster.client.init_producer_id()
    assert first[1] == second[1] == 0 and first[0] != second[0]
    cluster.restart_gateway()
    assert wait_until(lambda: len(cluster.gateway.registry.live_nodes()) == 3)
    third = cluster.client.init_producer_id()
    assert third[0] not in (first[0], second[0])  # a restart starts a fresh block
    response = cluster.stub.InitProducerId(
        gateway_pb2.InitProducerIdRequest(transactional_id="tx"), timeout=10
    )
    assert isinstance(error_from_code(response.error, response.error_message), InvalidRequestError)


def test_the_default_producer_numbers_its_batches(cluster):
    cluster.admin.create_topic("numbered", 1, 3)
    with Producer(cluster.address, linger_ms=0) as producer:
        for i in range(5):
            producer.send("numbered", b"v%d" % i).get(timeout=10)
    batches = _batches(cluster.log("numbered", 0))
    assert {b.header.producer_id for b in batches} != {-1}
    assert len({b.header.producer_id for b in batches}) == 1
    sequences = [(b.header.base_sequence, b.header.record_count) for b in batches]
    expected = 0
    for base, count in sequences:
        assert base == expected
        expected += count


def test_a_retry_after_a_lost_answer_is_written_once(cluster):
    cluster.admin.create_topic("lost", 1, 3)
    leader = cluster.leader_of("lost", 0)
    real_wait = leader.replicas.wait_for_replication
    answered = []

    def written_but_timed_out_once(topic, results, timeout_ms):
        results = real_wait(topic, results, timeout_ms)
        if not answered:  # written and replicated, but the producer hears a timeout
            answered.append(results)
            return [AppendResult(r.partition, None, RequestTimedOutError("lost")) for r in results]
        return results

    leader.replicas.wait_for_replication = written_but_timed_out_once
    with Producer(cluster.address, linger_ms=0, retry_backoff_ms=20) as producer:
        metadata = producer.send("lost", b"once").get(timeout=20)
    assert answered and metadata.offset == 0
    assert [r.value for b in _batches(cluster.log("lost", 0)) for r in b.records()] == [b"once"]


def _records_once_at_their_offsets(log, futures):
    """Every acknowledged record is in the log exactly once, at the offset it was
    acknowledged with (the checks that caught "acked 200, in the log 1")."""
    stored = {r.offset: r.value for b in _batches(log) for r in b.records()}
    values = list(stored.values())
    assert len(values) == len(set(values)), "a record was written twice"
    for value, future in futures:
        offset = future.get(timeout=30).offset
        assert stored.get(offset) == value, f"{value!r} acknowledged at {offset}"
    assert sorted(stored.values()) == sorted(v for v, _ in futures)


def test_answers_lost_after_requests_of_several_batches_lose_and_repeat_nothing(cluster):
    """Issue 26: a request of several batches written, its answer lost; the retry used to
    go out with newer batches, the node answered the first duplicate's offsets for all of
    them and wrote none of the new ones, and the sender acknowledged them all."""
    cluster.admin.create_topic("several", 1, 3)
    leader = cluster.leader_of("several", 0)
    real_wait = leader.replicas.wait_for_replication
    lost = []

    def every_third_answer_lost(topic, results, timeout_ms):
        results = real_wait(topic, results, timeout_ms)
        lost.append(len(lost) % 3 == 0)
        if lost[-1]:  # written and replicated, but the producer hears a timeout
            return [AppendResult(r.partition, None, RequestTimedOutError("lost")) for r in results]
        return results

    leader.replicas.wait_for_replication = every_third_answer_lost
    # Small batches and a linger, so that requests carry several batches of the partition.
    with Producer(cluster.address, batch_size=64, linger_ms=20, retry_backoff_ms=10) as producer:
        futures = [(b"record-%03d" % i, None) for i in range(200)]
        futures = [(v, producer.send("several", v, partition=0)) for v, _ in futures]
        producer.flush(timeout=60)
        assert producer.metrics()["producer-metrics"]["producer-id-resets"] == 0
    _records_once_at_their_offsets(cluster.log("several", 0), futures)
    assert sum(lost) >= 3


def test_an_answer_covering_fewer_records_than_sent_acknowledges_only_those(cluster):
    """The sender believes an answer only as far as its offsets go: the batches it does not
    cover are sent again (alone, so each gets an answer of its own)."""
    cluster.admin.create_topic("short", 1, 3)
    leader = cluster.leader_of("short", 0)
    real_wait = leader.replicas.wait_for_replication
    shortened, retried = [], []

    def first_answer_cut_short(topic, results, timeout_ms):
        results = real_wait(topic, results, timeout_ms)
        info = results[0].info
        if shortened and info is not None and info.batch_count == 0:
            retried.append(info)  # a duplicate: a batch sent again, answered, not rewritten
        if not shortened and info is not None and info.batch_count > 1:
            shortened.append(info)
            cut = dataclasses.replace(info, last_offset=info.first_offset)
            return [dataclasses.replace(results[0], info=cut)]
        return results

    leader.replicas.wait_for_replication = first_answer_cut_short
    with Producer(cluster.address, batch_size=64, linger_ms=50, retry_backoff_ms=10) as producer:
        futures = [
            (b"value-%02d" % i, producer.send("short", b"value-%02d" % i, partition=0))
            for i in range(20)
        ]
        producer.flush(timeout=60)
    assert shortened, "no request carried several batches"
    # The batches past the answer's last offset were sent again, each alone.
    assert len(retried) == shortened[0].batch_count - 1
    _records_once_at_their_offsets(cluster.log("short", 0), futures)


def test_a_retry_at_the_new_leader_after_failover_is_written_once(cluster):
    cluster.admin.create_topic("moved", 1, 3)
    producer_id, _ = cluster.client.init_producer_id()
    batch = idempotent_batch(producer_id, 0, [b"a", b"b"])
    [first] = cluster.client.produce("moved", {0: batch}, acks=-1)
    assert first.error == 0
    old_leader = cluster.gateway.registry.route("moved", 0).leader
    cluster.stop_node(old_leader, controlled=False)
    assert wait_until(
        lambda: cluster.gateway.registry.topic("moved").partitions[0].leader not in (-1, old_leader)
    )
    # The producer never heard its answer and sends the same batch again: the new leader
    # knows the sequence from the batches it copied.
    retry = None

    def retried():
        nonlocal retry
        try:
            [retry] = cluster.client.produce("moved", {0: batch}, acks=-1)
        except SeglogError as exc:
            # The gateway routes by the registry at once; the new leader may not have
            # applied its registration yet (NOT_LEADER_OR_FOLLOWER), as a producer retries.
            if not exc.retriable:
                raise
            return False
        return retry.error == 0

    assert wait_until(retried, 10)
    assert (retry.base_offset, retry.last_offset) == (first.base_offset, first.last_offset)
    assert cluster.log("moved", 0).log_end_offset == 2


def test_a_gap_in_sequences_is_refused_and_writes_nothing(cluster):
    cluster.admin.create_topic("gap", 1, 1)
    producer_id, _ = cluster.client.init_producer_id()
    assert (
        cluster.client.produce("gap", {0: idempotent_batch(producer_id, 0, [b"a"])})[0].error == 0
    )
    [result] = cluster.client.produce("gap", {0: idempotent_batch(producer_id, 5, [b"b"])})
    assert isinstance(error_from_code(result.error, result.error_message), OutOfOrderSequenceError)
    assert cluster.log("gap", 0).log_end_offset == 1
