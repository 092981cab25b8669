"""A storage node's readiness (services/storage_node/readiness.py), asked the way Kubernetes'
gRPC readiness probe asks it: the standard health service's `seglog.in-sync` is SERVING only
while the node is in the ISR of every partition it holds, so a node restarted behind its
leaders is not Ready until it has caught up and its leaders have taken it back."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from seglog.client import Producer
from services.storage_node.readiness import IN_SYNC_SERVICE
from tests.cluster import LocalCluster
from tests.waiting import wait_for

TOPIC = "ready"
PARTITIONS = 3
# Node 3 copies one batch per fetch round when it comes back, so catching up takes rounds.
SLOW_CATCH_UP = {"replica.fetch.max.bytes": "1", "replica.fetch.response.max.bytes": "1"}


def _in_sync_status(node) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{node.port}") as channel:
        request = health_pb2.HealthCheckRequest(service=IN_SYNC_SERVICE)
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status


def _in_every_isr(cluster, node_id: int) -> bool:
    topic = cluster.gateway.registry.topic(TOPIC)
    return all(node_id in p.isr for p in topic.partitions)


@pytest.mark.slow
def test_a_restarted_node_is_ready_only_once_back_in_every_isr(tmp_path):
    fast = {"replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100"}
    cluster = LocalCluster(tmp_path, nodes=3, node_configs=fast)
    serving = health_pb2.HealthCheckResponse.SERVING
    try:
        cluster.admin.create_topic(TOPIC, PARTITIONS, 3)
        for node in cluster.nodes.values():
            wait_for(lambda node=node: _in_sync_status(node) == serving, 15, "every node ready")

        cluster.stop_node(3)
        with Producer(cluster.address, linger_ms=5, batch_size=4096) as producer:
            for p in range(PARTITIONS):
                producer.send_many(TOPIC, [b"x" * 1000] * 1500, partition=p).get(timeout=60)
        assert not _in_every_isr(cluster, 3)

        node = cluster.start_node(3, **SLOW_CATCH_UP)
        statuses = []

        def ready() -> bool:
            status = _in_sync_status(node)
            statuses.append(status)
            if status == serving:  # never Ready while the registry has it out of an ISR
                assert _in_every_isr(cluster, 3), "Ready while out of an ISR"
            return status == serving

        wait_for(ready, 60, "node 3 ready again")
        assert statuses[0] != serving, "Ready before it had caught up"
        assert _in_every_isr(cluster, 3)
        cluster.stop_node(3)  # draining: the probe must say so before the process is gone
        assert node.readiness is not None and not node.readiness.ready
    finally:
        cluster.close()
