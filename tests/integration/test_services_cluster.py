"""The cluster around the data path, on real servers: topic administration's checks,
internal topics, describing offsets and liveness, a node down (its partitions unavailable,
the others served, fetches across nodes answered), a gateway restart keeping topics and
routing, a node that missed a delete or a create, health and reflection, a node not serving
while it loads or drains, and a call cut off by its channel closing."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from seglog.client.gateway import FetchPosition
from seglog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    LeaderNotAvailableError,
    NodeUnavailableError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from seglog.records import iter_records
from seglog.rpc.status import error_from_rpc
from seglog.v1 import common_pb2, gateway_pb2
from services.storage_node.server import StorageNode
from services.storage_node.settings import NodeConfig
from tests.batches import make_batch
from tests.cluster import SESSION_TIMEOUT_MS
from tests.gateway_calls import produce_raw
from tests.waiting import wait_until


def test_topic_admin_validation(cluster):
    cluster.admin.create_topic("good.topic_1", 2, configs={"retention.ms": "1000"})
    with pytest.raises(TopicAlreadyExistsError):
        cluster.admin.create_topic("good.topic_1", 2)
    with pytest.raises(InvalidTopicError):
        cluster.admin.create_topic("bad name!", 1)
    with pytest.raises(InvalidPartitionsError):
        cluster.admin.create_topic("t0", 0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 3 live"):
        cluster.admin.create_topic("t4", 1, 4)
    with pytest.raises(InvalidReplicationFactorError, match="must be in"):
        cluster.admin.create_topic("t0r", 1, 0)
    with pytest.raises(InvalidConfigError):
        cluster.admin.create_topic("tc", 1, configs={"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError):
        cluster.admin.create_topic("tc", 1, configs={"no.such.config": "1"})
    cluster.admin.create_topic("validated", 1, validate_only=True)
    names = [t.name for t in cluster.client.list_topics()]
    assert names == ["good.topic_1"]
    description = cluster.admin.describe_topic("good.topic_1")
    assert dict(description.configs) == {"retention.ms": "1000"}
    assert cluster.log("good.topic_1", 1).config.retention_ms == 1000
    cluster.admin.delete_topic("good.topic_1")
    assert cluster.client.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError):
        cluster.admin.delete_topic("good.topic_1")
    assert all(not node.logs.logs() for node in cluster.nodes.values())


def test_internal_topics_are_listed_only_on_request(cluster):
    cluster.gateway.topic_admin.create_internal_topic(
        "__consumer_offsets", 1, {"cleanup.policy": "compact"}
    )
    assert cluster.client.list_topics() == []
    (listing,) = cluster.client.list_topics(include_internal=True)
    assert listing.internal


def test_describe_reports_offsets_and_cluster_liveness(cluster):
    cluster.admin.create_topic("t", 3)
    produce_raw(cluster, "t", {1: make_batch([b"a", b"b"])})
    description = cluster.admin.describe_topic("t")
    assert [p.log_end_offset for p in description.partitions] == [0, 2, 0]
    assert [p.replicas[0] for p in description.partitions] == [
        p.leader for p in description.partitions
    ]
    nodes = cluster.admin.describe_cluster().nodes
    assert [(n.node_id, n.live) for n in nodes] == [(1, True), (2, True), (3, True)]


def test_a_node_down_is_unavailable_and_others_keep_serving(cluster):
    cluster.admin.create_topic("t", 3)
    down = cluster.gateway.registry.route("t", 0).leader
    cluster.stop_node(down)
    assert wait_until(lambda: not cluster.gateway.registry.is_live(down), SESSION_TIMEOUT_MS / 100)
    with pytest.raises(LeaderNotAvailableError) as info:
        produce_raw(cluster, "t", {0: make_batch([b"x"])})
    assert info.value.retriable
    for p in (1, 2):
        assert produce_raw(cluster, "t", {p: make_batch([b"x"])}).partitions[0].error == 0
    live = {n.node_id: n.live for n in cluster.admin.describe_cluster().nodes}
    assert live[down] is False
    description = cluster.admin.describe_topic("t")
    assert common_pb2.ErrorCode.Name(description.partitions[0].error) == "LEADER_NOT_AVAILABLE"

    cluster.start_node(down)
    assert produce_raw(cluster, "t", {0: make_batch([b"back"])}).partitions[0].error == 0
    # Each leader change is a new term: to none when its session expired, back at its return.
    assert cluster.admin.describe_topic("t").partitions[0].leader_epoch == 2


def test_a_fetch_across_nodes_answers_a_dead_nodes_partitions_with_errors(cluster):
    cluster.admin.create_topic("spread", 3)
    leaders = [cluster.gateway.registry.route("spread", p).leader for p in range(3)]
    assert len(set(leaders)) == 3
    produce_raw(cluster, "spread", {p: make_batch([b"p%d" % p]) for p in range(3)})
    down = leaders[2]
    cluster.stop_node(down)  # the gateway still routes to it: its session has not expired
    messages = list(
        cluster.client.fetch(
            [FetchPosition("spread", p, 0, 1 << 20) for p in range(3)], max_wait_ms=0
        )
    )
    by_partition = {m.partition: m for m in messages}
    assert sorted(by_partition) == [0, 1, 2]
    for p in (0, 1):
        assert by_partition[p].error == 0
        assert [r.value for r in iter_records(by_partition[p].records)] == [b"p%d" % p]
    assert common_pb2.ErrorCode.Name(by_partition[2].error) == "LEADER_NOT_AVAILABLE"


def test_a_waiting_fetch_across_nodes_answers_once_one_node_has_data(cluster):
    """Kafka's min_bytes is the request's: once one node answered with records, the nodes
    still long-polling are cancelled, not waited out (their partitions are asked again by the
    client's next fetch), and the node that answered is relayed whole."""
    cluster.admin.create_topic("one-busy", 3, 1)
    leaders = {cluster.gateway.registry.route("one-busy", p).leader for p in range(3)}
    assert len(leaders) == 3
    produce_raw(cluster, "one-busy", {1: make_batch([b"here", b"too"])})
    started = time.monotonic()
    messages = list(
        cluster.client.fetch(
            [FetchPosition("one-busy", p, 0, 1 << 20) for p in range(3)], max_wait_ms=10_000
        )
    )
    assert time.monotonic() - started < 5  # not the 10 s the empty partitions may wait
    answered = [(m.partition, [r.value for r in iter_records(m.records)]) for m in messages]
    assert [a for a in answered if a[1]] == [(1, [b"here", b"too"])]
    assert all(m.error == 0 for m in messages)


def test_gateway_restart_keeps_topics_placements_and_routing(cluster):
    cluster.admin.create_topic("t", 4, configs={"segment.bytes": "1048576"})
    produce_raw(cluster, "t", {p: make_batch([b"before"]) for p in range(4)})
    before = gateway_pb2.DescribeTopicsResponse.FromString(
        cluster.stub.DescribeTopics(gateway_pb2.DescribeTopicsRequest()).SerializeToString()
    )
    cluster.restart_gateway()
    after = cluster.stub.DescribeTopics(gateway_pb2.DescribeTopicsRequest())
    assert [(p.leader, p.replicas[:]) for p in after.topics[0].partitions] == [
        (p.leader, p.replicas[:]) for p in before.topics[0].partitions
    ]
    assert dict(after.topics[0].configs) == {"segment.bytes": "1048576"}
    response = produce_raw(cluster, "t", {p: make_batch([b"after"]) for p in range(4)})
    assert all(r.error == 0 and r.base_offset == 1 for r in response.partitions)


def test_a_node_that_missed_a_delete_sets_the_partition_aside(cluster):
    cluster.admin.create_topic("gone", 3)
    node_id = cluster.gateway.registry.route("gone", 0).leader
    node_dir = cluster.nodes[node_id].config.data_dir
    cluster.stop_node(node_id)
    cluster.admin.delete_topic("gone")
    cluster.start_node(node_id)
    assert wait_until(lambda: (node_dir / "gone-0-stray").is_dir())
    assert not cluster.nodes[node_id].logs.logs()
    assert not (node_dir / "gone-0").exists()


def test_a_node_that_missed_a_create_gets_its_partitions_from_heartbeats(cluster):
    registry = cluster.gateway.registry
    # Create in the registry only, as if every CreatePartition call had been lost.
    registry.create_topic("late", 3, 1, {"retention.ms": "5000"})
    for p in range(3):
        assert wait_until(lambda p=p: ("late", p) in cluster.leader_of("late", p).logs.logs())
    assert cluster.log("late", 2).config.retention_ms == 5000


def test_health_and_reflection_are_served(cluster):
    health = health_pb2_grpc.HealthStub(cluster.channel)
    answer = health.Check(health_pb2.HealthCheckRequest(service="seglog.v1.Gateway"), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(cluster.channel)
    (reply,) = list(
        reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
    )
    names = {s.name for s in reply.list_services_response.service}
    assert {"seglog.v1.Gateway", "grpc.health.v1.Health"} <= names
    assert "seglog.v1.Registry" not in names  # the nodes' service has a listener of its own
    with grpc.insecure_channel(cluster.gateway.internal_address) as internal:
        health = health_pb2_grpc.HealthStub(internal)
        request = health_pb2.HealthCheckRequest(service="seglog.v1.Registry")
        assert health.Check(request, timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    node_channel = grpc.insecure_channel(cluster.nodes[1].address)
    try:
        health = health_pb2_grpc.HealthStub(node_channel)
        request = health_pb2.HealthCheckRequest(service="seglog.v1.StorageNode")
        assert health.Check(request, timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        node_channel.close()


def test_a_node_is_not_serving_while_it_loads_its_logs_or_drains(cluster, tmp_path):
    """Kubernetes' gRPC probes ask the standard health service for "": a node listens at
    once, answers NOT_SERVING until its logs are loaded, and again once it starts draining
    (controlled shutdown), so no new work is routed to it meanwhile."""
    loading, draining = threading.Event(), threading.Event()
    config = NodeConfig(
        node_id=7,
        listen="127.0.0.1:0",
        data_dir=tmp_path / "node-7",
        gateway=cluster.gateway.internal_address,
        heartbeat_interval_ms=100,
        cluster_secret=cluster.cluster_secret,
    )
    node = StorageNode(config)
    real_startup = node.logs.startup
    node.logs.startup = lambda: (loading.wait(30), real_startup())  # type: ignore[method-assign]
    starter = threading.Thread(target=node.start)
    starter.start()
    try:
        assert wait_until(lambda: node.port != 0)
        request = health_pb2.HealthCheckRequest(service="")
        with grpc.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
            assert health.Check(request, timeout=5).status == not_serving
            loading.set()
            starter.join(30)
            assert health.Check(request, timeout=5).status == health_pb2.HealthCheckResponse.SERVING
            assert node.session is not None
            # Only a registered node drains through a controlled shutdown; on a busy machine
            # its first registration can come after its logs are loaded.
            session = node.session
            assert wait_until(lambda: session.registered.is_set())
            node.session.controlled_shutdown = lambda timeout_s: draining.wait(30)
            stopper = threading.Thread(target=node.stop, kwargs={"grace_s": 1})
            stopper.start()
            assert wait_until(lambda: health.Check(request, timeout=5).status == not_serving)
            draining.set()
            stopper.join(30)
    finally:
        loading.set()
        draining.set()
        starter.join(30)


def test_a_call_cut_off_by_its_channel_closing_is_a_retriable_error():
    """What the gateway sees when a node re-registers at a new address while a produce waits
    on the old channel (the gateway closes it), and what a client sees when its channel goes:
    the outcome is unknown, so producers must retry rather than fail the batch."""
    entered, release = threading.Event(), threading.Event()

    def hold(request, context):
        entered.set()
        release.wait(10)
        return request

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "t.Hold", {"Hold": grpc.unary_unary_rpc_method_handler(hold)}
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        call = channel.unary_unary("/t.Hold/Hold").future(b"x", timeout=10)
        assert entered.wait(10)
        channel.close()
        with pytest.raises(grpc.RpcError) as info:
            call.result(timeout=10)
        assert info.value.code() == grpc.StatusCode.CANCELLED
        error = error_from_rpc(info.value)
        assert isinstance(error, NodeUnavailableError) and error.retriable
    finally:
        release.set()
        server.stop(0)
