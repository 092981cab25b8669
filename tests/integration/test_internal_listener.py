"""The gateway's internal listener (services/gateway/internal_listener.py) over a real gateway
and node: nodes' registry calls are served there whatever the clients' request-memory pool
holds, with a message size limit of their own."""

from __future__ import annotations

import time

import grpc
import pytest

from seglog.errors import MemoryBudgetExhaustedError
from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from services.gateway.internal_listener import INTERNAL_MAX_REQUEST_BYTES
from tests.batches import make_batch
from tests.cluster import SESSION_TIMEOUT_MS, LocalCluster
from tests.waiting import wait_until

POOL_BYTES = 1024 * 1024


@pytest.fixture
def cluster(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, queued_max_request_bytes=POOL_BYTES)
    yield cluster
    cluster.close()


def test_heartbeats_are_answered_while_the_clients_memory_pool_is_full(cluster):
    """The pool held whole (as by clients' requests in flight): a client's produce waits
    for it and is refused, the node's heartbeats go on being answered and it stays unfenced."""
    cluster.admin.create_topic("t", 1, 1)
    node = cluster.nodes[1]
    assert node.session is not None
    pool = cluster.gateway.request_memory
    pool.acquire(POOL_BYTES)
    try:
        with pytest.raises(MemoryBudgetExhaustedError):
            cluster.client.produce("t", {0: make_batch([b"v"])})
        sent = node.session.heartbeats_sent
        # 30 heartbeats (3 s at 100 ms: twice the 1.5 s session), each answered at once.
        assert wait_until(lambda: node.session.heartbeats_sent >= sent + 30, 15)
        assert node.replicas.fenced is None
        assert cluster.gateway.registry.live_nodes() == [1]
        last = cluster.gateway.registry.nodes[1].last_heartbeat
        assert last is not None and time.monotonic() - last < SESSION_TIMEOUT_MS / 1000
    finally:
        pool.release(POOL_BYTES)
    [answer] = cluster.client.produce("t", {0: make_batch([b"v"])})
    assert answer.error == 0


def test_a_registry_call_past_the_internal_size_limit_is_refused_unread(cluster):
    too_large = gateway_pb2.NodeHeartbeat(
        node_id=9, address="127.0.0.1:1", bulk_address="x" * INTERNAL_MAX_REQUEST_BYTES
    )
    options = [("grpc.max_send_message_length", -1)]
    with (
        grpc.insecure_channel(cluster.gateway.internal_address, options=options) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        gateway_pb2_grpc.RegistryStub(channel).RegisterNode(too_large, timeout=10)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert 9 not in cluster.gateway.registry.nodes
