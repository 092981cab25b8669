"""Storage nodes keep their sessions while clients flood the gateway (Kafka's separate
control plane listener, KIP-291): the nodes' registry calls have a listener, threads and
limits of their own (services/gateway/internal_listener.py), so nothing clients do to the
gateway's client listeners refuses or delays a heartbeat.

Real processes: a gateway (a 4 MiB request pool, 40 gRPC calls at once, a Kafka listener)
and three nodes fencing themselves after 2 s without an answered heartbeat. The flood
(tests/faults/client_flood.py) holds every gRPC server thread of the client listener with
stalled calls, loops Produce calls larger than the pool and holds Kafka connections that
announce 100 MiB frames, for three session timeouts."""

from __future__ import annotations

import time

import grpc
import pytest

from devtools.processes import node_process
from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from tests.batches import make_batch
from tests.e2e.test_processes import ProcessCluster
from tests.faults.client_flood import MIB, ClientFlood, FloodShape
from tests.ports import free_ports
from tests.waiting import wait_until

SESSION_TIMEOUT_MS = 2000
FLOOD_S = 3 * SESSION_TIMEOUT_MS / 1000
POOL_BYTES = 4 * MIB
MAX_CONCURRENT_REQUESTS = 40
SHAPE = FloodShape(
    stalled_connections=6,
    stalled_calls_per_connection=8,  # 48: past the 32 threads and the 40 calls allowed
    produce_callers=4,
    produce_bytes=POOL_BYTES + MIB,  # larger than the pool: each waits for it alone
    kafka_connections=3,
    kafka_frame_bytes=100 * MIB,
)
FENCED = "is fenced"
HEARTBEAT_REFUSED = "heartbeat to the gateway failed: StatusCode.RESOURCE_EXHAUSTED"


def _client_listener_answers(address: str) -> bool:
    """Whether the gateway's client listener answers a small call within a second."""
    with grpc.insecure_channel(address) as channel:
        try:
            gateway_pb2_grpc.GatewayStub(channel).DescribeCluster(
                gateway_pb2.DescribeClusterRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return True


@pytest.fixture
def cluster(tmp_path):
    [kafka_port] = free_ports(1)
    cluster = ProcessCluster(
        tmp_path,
        nodes=3,
        gateway_args=[
            *("--queued-max-request-bytes", str(POOL_BYTES)),
            *("--max-concurrent-requests", str(MAX_CONCURRENT_REQUESTS)),
            *("--kafka-listen", f"127.0.0.1:{kafka_port}"),
        ],
        node_args=["--config", f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}"],
    )
    cluster.kafka_address = f"127.0.0.1:{kafka_port}"
    yield cluster
    cluster.close()


def _logs_since(cluster: ProcessCluster, offsets: dict[int, int]) -> dict[int, str]:
    return {
        n: (cluster.root / f"node-{n}.log").read_bytes()[offset:].decode(errors="replace")
        for n, offset in offsets.items()
    }


def _produced(cluster: ProcessCluster, value: bytes) -> bool:
    """Whether a record was written to each partition of `kept`."""
    try:
        batch = make_batch([value])
        answers = cluster.client.produce("kept", dict.fromkeys(range(3), batch))
    except Exception:
        return False
    return all(a.error == 0 for a in answers)


@pytest.mark.slow
def test_a_client_flood_of_the_gateway_fences_no_node(cluster):
    cluster.admin.create_topic("kept", 3, 3)
    # A new topic's leaders take a moment to be everywhere on a busy machine.
    assert wait_until(lambda: _produced(cluster, b"before"), 15)
    leaders = {
        p.partition: (p.leader, p.leader_epoch)
        for p in cluster.admin.describe_topic("kept").partitions
    }
    offsets = {n: (cluster.root / f"node-{n}.log").stat().st_size for n in cluster.nodes}

    flood = ClientFlood(cluster.gateway.address, cluster.kafka_address, SHAPE)
    try:
        # The flood holds the client listener: a small call there is not answered.
        # Its 48 stalled calls and 3 connections take a few seconds to open on a busy machine.
        assert wait_until(lambda: not _client_listener_answers(cluster.gateway.address), 30)
        ends = time.monotonic() + FLOOD_S
        while time.monotonic() < ends:  # bounded: FLOOD_S, checking every heartbeat or so
            logs = _logs_since(cluster, offsets)
            assert not any(FENCED in log for log in logs.values()), logs
            assert all(node.alive() for node in cluster.nodes.values())
            assert not _client_listener_answers(cluster.gateway.address)  # still flooded
        summary = flood.summary()
    finally:
        flood.release()
    print(f"flood held {FLOOD_S:g} s: {summary}")

    logs = _logs_since(cluster, offsets)
    for node_id, log in logs.items():
        assert FENCED not in log, (node_id, log)
        # Refused for want of memory or call slots: what the flood does to clients' calls.
        assert HEARTBEAT_REFUSED not in log, (node_id, log)
    # Nor did the registry see a session expire (node_registrations.py says so when it does).
    assert "session expired" not in (cluster.root / "gateway.log").read_text(errors="replace")

    # Once released, clients are served again, by the same leaders (no session lapsed).
    assert wait_until(lambda: _produced(cluster, b"after"), 15)
    after = {
        p.partition: (p.leader, p.leader_epoch)
        for p in cluster.admin.describe_topic("kept").partitions
    }
    assert after == leaders


@pytest.mark.slow
def test_a_node_given_the_client_listener_stops_and_says_where_to_call(tmp_path):
    """The clients' listener serves no Registry: a node pointed there cannot register, and
    no retry can change that, so it stops at once (exit code 1) naming the way out."""
    cluster = ProcessCluster(tmp_path, nodes=0)
    try:
        node = node_process(
            1,
            "127.0.0.1:0",
            tmp_path / "node-1",
            cluster.gateway.address,  # the clients' listener, not internal_address
            stderr_path=tmp_path / "node-1.log",
        )
        node.start()
        try:
            assert wait_until(lambda: not node.alive(), 30)
            assert node.stop() == 1
        finally:
            node.kill()
        log = (tmp_path / "node-1.log").read_text()
        assert "serves no Registry there" in log and "--internal-listen" in log, log
        assert cluster.gateway.internal_address != cluster.gateway.address
    finally:
        cluster.close()
