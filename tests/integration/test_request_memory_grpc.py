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
