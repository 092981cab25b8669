"""The gRPC side of the gateway's request pool (queued.max.request.bytes), on a real
in-process cluster: while the pool is full a call waits briefly, then answers
RESOURCE_EXHAUSTED with the retriable reason MEMORY_BUDGET_EXHAUSTED, having done nothing;
the same call succeeds once there is room."""

from __future__ import annotations

import grpc
import pytest

from seglog.errors import MemoryBudgetExhaustedError
from seglog.rpc.status import error_from_rpc
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until

POOL_BYTES = 1024 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("pool"), nodes=1, queued_max_request_bytes=POOL_BYTES)
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
