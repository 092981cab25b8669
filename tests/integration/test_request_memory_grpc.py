"""The gRPC side of the gateway's request pool (queued.max.request.bytes), on a real
in-process cluster: while the pool is full a call waits briefly, then answers
RESOURCE_EXHAUSTED with the retriable reason MEMORY_BUDGET_EXHAUSTED, having done nothing;
the same call succeeds once there is room. And past max.concurrent.requests gRPC itself
refuses a call before decoding it: the client backs off and retries (SERVER_BUSY), while the
Kafka listener, whose calls do not go through the gRPC server, is not counted."""

from __future__ import annotations

import threading

import grpc
import kafka
import pytest

from seglog.client.producer import Producer
from seglog.errors import MemoryBudgetExhaustedError, ServerBusyError
from seglog.rpc.status import error_from_rpc
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until

POOL_BYTES = 1024 * 1024
# Few enough for a handful of long polls to take them all; more than the calls the other
# tests here make at once (node heartbeats count too).
CONCURRENT_CALLS = 6
# The polls hold every call for POLL_WAIT_MS, the node's heartbeats refused meanwhile: the
# session outlasts that, and the polls last long enough for the checks made while they hold,
# on a busy machine too.
POLL_WAIT_MS = 4000
SESSION_TIMEOUT_MS = 12_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("pool"),
        nodes=1,
        queued_max_request_bytes=POOL_BYTES,
        max_concurrent_requests=CONCURRENT_CALLS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    yield c
    c.close()


def test_a_call_finding_the_pool_full_is_refused_retriably_and_acts_on_nothing(cluster):
    cluster.admin.create_topic("pooled", 1, 1)
    request = common_pb2.ProduceRequest(topic="pooled", acks=-1)
    request.partitions.add(partition=0, records=make_batch([b"x" * 1000]))
    pool = cluster.gateway.request_memory
    pool.acquire(POOL_BYTES)  # as if other requests held it all
    try:
        with pytest.raises(grpc.RpcError) as refused:
            cluster.stub.Produce(request, timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        error = error_from_rpc(refused.value)
        assert isinstance(error, MemoryBudgetExhaustedError) and error.retriable
    finally:
        pool.release(POOL_BYTES)
    answer = cluster.stub.Produce(request, timeout=30)
    assert answer.partitions[0].error == 0 and answer.partitions[0].base_offset == 0
    assert pool.used_bytes == 0 and pool.refused == 1


def _fetch_records(cluster, topic: str) -> bytes:
    request = common_pb2.FetchRequest(max_wait_ms=0, max_bytes=64 * 1024 * 1024)
    request.partitions.add(topic=topic, partition=0, fetch_offset=0, partition_max_bytes=1 << 30)
    return b"".join(m.records for m in cluster.stub.Fetch(request, timeout=30))


def test_a_fetch_answer_reserves_its_bytes_first_and_is_smaller_rather_than_refused(cluster):
    """A fetch asking for 64 MiB holds at most its share of the pool (the pool / 2 / fetch
    threads) and asks the node for no more (one batch at least); the share is given back
    when the call ends; with the pool full it waits, then is refused retriably."""
    cluster.admin.create_topic("answered", 1, 1)
    batch = make_batch([b"r" * 20_000])
    for _ in range(5):
        [answer] = cluster.client.produce("answered", {0: batch})
        assert answer.error == 0
    pool = cluster.gateway.request_memory
    share_bytes = cluster.gateway.fetch_memory.share_bytes
    assert 0 < share_bytes < 5 * len(batch)
    records = _fetch_records(cluster, "answered")
    assert len(batch) <= len(records) <= max(share_bytes, len(batch))
    assert wait_until(lambda: pool.used_bytes == 0), pool.used_bytes
    pool.acquire(POOL_BYTES)
    try:
        with pytest.raises(grpc.RpcError) as refused:
            _fetch_records(cluster, "answered")
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert isinstance(error_from_rpc(refused.value), MemoryBudgetExhaustedError)
    finally:
        pool.release(POOL_BYTES)
    assert wait_until(lambda: pool.used_bytes == 0), pool.used_bytes


def _long_poll(cluster) -> None:
    """One fetch waiting its whole max_wait_ms at the end of `limited` (it wants more bytes
    than arrive), taken again while a heartbeat holds the last call the limit allows."""
    poll = common_pb2.FetchRequest(min_bytes=1 << 20, max_wait_ms=POLL_WAIT_MS, max_bytes=2 << 20)
    poll.partitions.add(topic="limited", partition=0, fetch_offset=1, partition_max_bytes=2 << 20)
    for _ in range(100):
        try:
            list(cluster.stub.Fetch(poll, timeout=30))
            return
        except grpc.RpcError as exc:
            if not isinstance(error_from_rpc(exc), ServerBusyError):
                raise


def test_past_the_concurrent_call_limit_clients_back_off_and_kafka_is_not_counted(cluster):
    """Long polls take every call max.concurrent.requests allows (for less than a session:
    node heartbeats count too, and a node whose heartbeats fail for a session is fenced).
    Meanwhile a gRPC
    produce is refused SERVER_BUSY, retriable, having done nothing; a Kafka client's produce
    goes through; seglog's producer backs off and its record lands once the polls end."""
    cluster.admin.create_topic("limited", 1, 1)
    kafka_producer = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_address, acks="all")
    try:
        assert kafka_producer.send("limited", b"before").get(timeout=30).offset == 0
        slots = cluster.gateway.fetch_threads.slots
        polls = [
            threading.Thread(target=_long_poll, args=(cluster,)) for _ in range(CONCURRENT_CALLS)
        ]
        for thread in polls:
            thread.start()
        try:
            assert wait_until(lambda: slots.in_use == CONCURRENT_CALLS, timeout_s=20)
            request = common_pb2.ProduceRequest(topic="limited", acks=-1)
            request.partitions.add(partition=0, records=make_batch([b"refused"]))
            with pytest.raises(grpc.RpcError) as refused:
                cluster.stub.Produce(request, timeout=30)
            error = error_from_rpc(refused.value)
            assert isinstance(error, ServerBusyError) and error.retriable, error
            # In-process, not through the gRPC server: not counted, not refused.
            assert kafka_producer.send("limited", b"kafka").get(timeout=30).offset == 1
            assert slots.in_use == CONCURRENT_CALLS, "the polls ended before the checks"
        finally:
            for thread in polls:
                thread.join(30)
    finally:
        kafka_producer.close()
    # Through the gateway (not straight to the leader), whose call limit is what is tested.
    with Producer(cluster.address, retry_backoff_ms=50, produce_transport="grpc") as producer:
        assert producer.send("limited", b"seglog", partition=0).get(timeout=30).offset == 2
        polls = [
            threading.Thread(target=_long_poll, args=(cluster,)) for _ in range(CONCURRENT_CALLS)
        ]
        for thread in polls:
            thread.start()
        assert wait_until(lambda: slots.in_use == CONCURRENT_CALLS, timeout_s=20)
        # Its produce is refused until the polls end, and sent again after a back-off.
        sent = producer.send("limited", b"retried", partition=0)
        for thread in polls:
            thread.join(30)
        assert sent.get(timeout=30).offset == 3
    assert cluster.log("limited", 0).log_end_offset == 4
