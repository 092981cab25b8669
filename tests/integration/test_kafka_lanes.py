"""Each storage node a Kafka broker at a lane of its own on the gateway's Kafka listener, at the
listener's port + its node id (kafka/node_lanes.py, brokers.py): bound as the node registers,
with no count given; Metadata names as each partition's leader its storage leader, any lane
serves any partition, Kafka's own clients write and read through them all (one connection per
lane), a node keeps its address across a gateway restart, and DescribeCluster v2 shows a
decommissioned node as Kafka shows a fenced broker."""

from __future__ import annotations

import socket

import confluent_kafka
import pytest
from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.client.structs import TopicPartition
from seglog.records import iter_records
from services.gateway.__main__ import parse_args as gateway_args
from services.gateway.kafka.node_lanes import NodeLanes, lane_port
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire, metadata
from tests.ports import free_port_run
from tests.rdkafka import assert_read_back_in_order, produce_round_robin, rdkafka_consume
from tests.waiting import wait_until

PARTITIONS = 6
TIMEOUT_S = 30
NODES = (1, 2, 3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("kafka-lanes"), nodes=3)
    yield c
    c.close()


def lane_addresses(cluster) -> dict[int, str]:
    """Each node's lane, once bound (at the keeper's tick or a first Metadata asking)."""
    listener = cluster.gateway.kafka_listener
    assert listener is not None
    assert wait_until(lambda: set(NODES) <= set(listener.lane_addresses), TIMEOUT_S)
    return listener.lane_addresses


def listener_port(cluster) -> int:
    return cluster.gateway.kafka_listener.port


def brokers_of(address: str, topic: str) -> dict[int, str]:
    return {b.node_id: f"{b.host}:{b.port}" for b in metadata(address, topic).brokers}


def described(address: str, include_fenced: bool) -> dict[int, tuple[str, bool]]:
    """DescribeCluster v2 on the wire: {broker id: (host:port, is_fenced)}."""
    request = DescribeClusterRequest[2](
        include_cluster_authorized_operations=False,
        endpoint_type=1,
        include_fenced_brokers=include_fenced,
    )
    with KafkaWire(address) as wire:
        answer = wire.request(request, 2, DescribeClusterResponse)
    assert answer.error_code == 0, answer.error_message
    return {b.broker_id: (f"{b.host}:{b.port}", b.is_fenced) for b in answer.brokers}


def test_metadata_names_each_node_a_broker_at_port_plus_its_id_and_the_storage_leader_the_leader(
    cluster,
):
    cluster.admin.create_topic("laned", PARTITIONS, 3)
    port = listener_port(cluster)
    expected = {n: f"127.0.0.1:{port + n}" for n in NODES}
    answer = metadata(cluster.kafka_address, "laned")
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in answer.brokers}
    assert brokers == expected
    assert lane_addresses(cluster) == expected  # bound here, at those ports
    registry = cluster.gateway.registry
    for partition in answer.topics[0].partitions:
        storage_leader = registry.route("laned", partition.partition_index).leader
        assert partition.leader_id == storage_leader
    # Three storage leaders, three lanes: every lane leads something.
    assert {p.leader_id for p in answer.topics[0].partitions} == set(brokers)
    # Every lane answers Metadata alike.
    for lane in expected.values():
        other = metadata(lane, "laned")
        assert {b.node_id for b in other.brokers} == set(brokers)
        assert [p.leader_id for p in other.topics[0].partitions] == [
            p.leader_id for p in answer.topics[0].partitions
        ]


def _produce_on(lane: str, topic: str, value: bytes, version: int = 10):
    request = ProduceRequest[version](
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=0, records=make_batch([value])
                    )
                ],
            )
        ],
    )
    with KafkaWire(lane) as wire:
        return wire.request(request, version, ProduceResponse)


def test_a_produce_on_a_lane_whose_node_does_not_lead_is_answered_not_leader(cluster):
    """As the broker it stands for: NOT_LEADER_OR_FOLLOWER with the leader's hint (KIP-951),
    nothing written, not relayed to the leader (kafka/lane_leaders.py: relayed, two
    pipelined produces across a leader change were answered NOT_LEADER and then
    OUT_OF_ORDER_SEQUENCE, and librdkafka bumped its epoch and wrote a batch twice). The
    leader's own lane, and the listener's port that is no node's, write it."""
    cluster.admin.create_topic("one-lane", 1, 3)
    leader = cluster.gateway.registry.route("one-lane", 0).leader
    lanes = lane_addresses(cluster)
    for node in NODES:
        if node == leader:
            continue
        answer = _produce_on(lanes[node], "one-lane", b"misdirected")
        result = answer.responses[0].partition_responses[0]
        assert result.error_code == 6  # NOT_LEADER_OR_FOLLOWER
        assert result.current_leader.leader_id == leader
        assert leader in {e.node_id for e in answer.node_endpoints}
    written = []
    for address in (lanes[leader], cluster.kafka_address):
        answer = _produce_on(address, "one-lane", address.encode())
        result = answer.responses[0].partition_responses[0]
        assert (result.error_code, result.base_offset) == (0, len(written))
        written.append(address.encode())
    log = cluster.log("one-lane", 0)
    assert [r.value for r in iter_records(bytes(log.read(0, 1 << 20)))] == written


def test_librdkafka_writes_through_every_lane_and_reads_it_back_in_order(cluster):
    cluster.admin.create_topic("through-lanes", PARTITIONS, 3)
    listener = cluster.gateway.kafka_listener
    accepted_before = {n: listener.accepted_connections.get(n, 0) for n in NODES}
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "acks": "all", "linger.ms": 5}
    )
    count = 600
    reported = produce_round_robin(producer, "through-lanes", PARTITIONS, count)
    # One connection per lane at least: each storage leader's partitions went on its own.
    assert all(listener.accepted_connections.get(n, 0) > accepted_before[n] for n in NODES)
    messages = rdkafka_consume(cluster.kafka_address, "through-lanes", range(PARTITIONS), count)
    assert_read_back_in_order(messages, reported, PARTITIONS, count)


def test_the_lane_count_setting_is_gone(capsys):
    """No count to guess: a lane per registered node, however many."""
    with pytest.raises(SystemExit):
        gateway_args(["--kafka-listen", "127.0.0.1:0", "--kafka-lanes", "3"])
    assert "--kafka-lanes" in capsys.readouterr().err


def test_a_node_keeps_its_broker_address_across_a_gateway_restart_and_a_new_node_gets_one(
    tmp_path,
):
    cluster = LocalCluster(tmp_path, nodes=2)
    try:
        cluster.admin.create_topic("kept", 2, 2)
        before = brokers_of(cluster.kafka_address, "kept")
        port = listener_port(cluster)
        assert before == {n: f"127.0.0.1:{port + n}" for n in (1, 2)}
        cluster.restart_gateway()
        assert wait_until(lambda: len(brokers_of(cluster.kafka_address, "kept")) == 2, TIMEOUT_S)
        assert brokers_of(cluster.kafka_address, "kept") == before
        # A node added to the running cluster gets its lane as it registers, and the others
        # keep theirs.
        cluster.start_node(3)
        assert wait_until(
            lambda: (
                brokers_of(cluster.kafka_address, "kept") == {**before, 3: f"127.0.0.1:{port + 3}"}
            ),
            TIMEOUT_S,
        )
        with KafkaWire(f"127.0.0.1:{port + 3}") as wire:  # reachable: it answers Metadata
            answer = wire.request(
                MetadataRequest[4](topics=None, allow_auto_topic_creation=False),
                4,
                MetadataResponse,
            )
        assert {b.node_id for b in answer.brokers} == {1, 2, 3}
    finally:
        cluster.close()


def accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except ConnectionRefusedError:
        return False
    return True


def test_describe_cluster_shows_a_decommissioned_node_fenced_and_its_lane_closes_once_empty(
    tmp_path,
):
    cluster = LocalCluster(tmp_path, nodes=3)
    try:
        cluster.admin.create_topic("held", 1, 3)  # node 3 holds a replica
        port = listener_port(cluster)
        address = cluster.kafka_address
        lane_3 = f"127.0.0.1:{port + 3}"
        everyone = {n: (f"127.0.0.1:{port + n}", False) for n in NODES}
        assert wait_until(lambda: described(address, True) == everyone, TIMEOUT_S)
        assert described(address, False) == everyone
        cluster.admin.decommission_node(3)
        # Kafka's view of a fenced broker: left out unless include_fenced_brokers, then
        # listed with is_fenced; the tools choose brokers from the first.
        assert wait_until(lambda: 3 not in described(address, False), TIMEOUT_S)
        assert described(address, True) == {**everyone, 3: (lane_3, True)}
        # Still serving its replica: its lane stays, and Metadata lists it (it may lead).
        assert accepts(lane_3)
        assert 3 in brokers_of(address, "held")
        # Emptied, its lane is closed; it is still shown fenced where Kafka would show it.
        cluster.admin.alter_partition_reassignments({TopicPartition("held", 0): [1, 2]})
        assert wait_until(lambda: not accepts(lane_3), TIMEOUT_S)
        assert described(address, True)[3] == (lane_3, True)
        # Recommissioned, it is a broker again at the same address.
        cluster.admin.recommission_node(3)
        assert wait_until(lambda: described(address, False) == everyone, TIMEOUT_S)
        assert accepts(lane_3)
        # A node down is fenced too.
        cluster.stop_node(2, controlled=False)
        assert wait_until(lambda: described(address, True)[2][1], TIMEOUT_S)
        assert set(described(address, False)) == {1, 3}
    finally:
        cluster.close()


def test_a_lane_whose_port_is_taken_is_listed_at_the_listener_and_bound_once_free():
    """Real sockets: a node whose port another process holds is not lost (listed at the
    listener's address, with a warning) and gets its lane when the port frees; a node id
    past 65535 - the port has none."""
    base = free_port_run(4)
    served: list[int] = []

    def serve(server: socket.socket, node: int) -> None:
        served.append(node)

    lanes = NodeLanes("127.0.0.1", base, None, serve)
    taken = socket.create_server(("127.0.0.1", base + 2))
    try:
        lanes.sync({1, 2})
        assert lanes.address(1) == ("127.0.0.1", base + 1)
        assert lanes.address(2) is None and 2 in lanes.unplaced and lanes.retrying
        taken.close()
        lanes.sync({1, 2})
        assert lanes.address(2) == ("127.0.0.1", base + 2) and not lanes.retrying
        assert sorted(served) == [1, 2]
        lanes.sync({1})  # node 2 gone for good: its port is free again
        assert lanes.address(2) is None
        socket.create_server(("127.0.0.1", base + 2)).close()
        assert lane_port(65530, 6) is None and lane_port(65530, 5) == 65535
        assert lane_port(0, 70000) == 0  # kernel-picked lanes have no ceiling
    finally:
        taken.close()
        lanes.close()
