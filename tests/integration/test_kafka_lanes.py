"""The gateway's Kafka listener with several lanes (`--kafka-lanes`, listener.py): each storage
node is a broker under its node id at a lane of its own (brokers.py), Metadata names as each
partition's leader its storage leader, any lane serves any partition, and Kafka's own clients
write and read through them all, one connection per lane."""

from __future__ import annotations

import socket

import confluent_kafka
import pytest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.records import iter_records
from services.gateway.__main__ import parse_args as gateway_args
from services.gateway.kafka.listener import KafkaListener
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire, metadata
from tests.rdkafka import assert_read_back_in_order, produce_round_robin, rdkafka_consume

LANES = 3
PARTITIONS = 6
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("kafka-lanes"), nodes=3, kafka_lanes=LANES)
    yield c
    c.close()


def lane_addresses(cluster) -> list[str]:
    listener = cluster.gateway.kafka_listener
    assert listener is not None
    return listener.lane_addresses


def test_metadata_names_each_node_a_broker_at_its_lane_and_the_storage_leader_the_leader(cluster):
    cluster.admin.create_topic("laned", PARTITIONS, 3)
    lanes = lane_addresses(cluster)
    assert len(set(lanes)) == LANES
    answer = metadata(cluster.kafka_address, "laned")
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in answer.brokers}
    # Each node under its own id, at a lane of its own (the registered nodes in id order).
    assert brokers == {node: lanes[node - 1] for node in (1, 2, 3)}
    registry = cluster.gateway.registry
    for partition in answer.topics[0].partitions:
        storage_leader = registry.route("laned", partition.partition_index).leader
        assert partition.leader_id == storage_leader
    # Three storage leaders, three lanes: every lane leads something.
    assert {p.leader_id for p in answer.topics[0].partitions} == set(brokers)
    # Every lane answers Metadata alike.
    for lane in lanes[1:]:
        other = metadata(lane, "laned")
        assert {b.node_id for b in other.brokers} == set(brokers)
        assert [p.leader_id for p in other.topics[0].partitions] == [
            p.leader_id for p in answer.topics[0].partitions
        ]


def test_any_lane_serves_any_partition(cluster):
    """A client whose metadata is older than a leader change writes through the lane it
    has: every lane relays to the real leader."""
    cluster.admin.create_topic("any-lane", 1, 3)
    for offset, lane in enumerate(lane_addresses(cluster)):
        request = ProduceRequest[9](
            transactional_id=None,
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name="any-lane",
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(
                            index=0, records=make_batch([lane.encode()])
                        )
                    ],
                )
            ],
        )
        with KafkaWire(lane) as wire:
            answer = wire.request(request, 9, ProduceResponse)
        result = answer.responses[0].partition_responses[0]
        assert (result.error_code, result.base_offset) == (0, offset)
    log = cluster.log("any-lane", 0)
    values = [r.value for r in iter_records(bytes(log.read(0, 1 << 20)))]
    assert values == [lane.encode() for lane in lane_addresses(cluster)]


def test_librdkafka_writes_through_every_lane_and_reads_it_back_in_order(cluster):
    cluster.admin.create_topic("through-lanes", PARTITIONS, 3)
    listener = cluster.gateway.kafka_listener
    accepted_before = list(listener.accepted_connections)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "acks": "all", "linger.ms": 5}
    )
    count = 600
    reported = produce_round_robin(producer, "through-lanes", PARTITIONS, count)
    # One connection per lane at least: each storage leader's partitions went on its own.
    assert all(
        after > before
        for before, after in zip(accepted_before, listener.accepted_connections, strict=True)
    )
    messages = rdkafka_consume(cluster.kafka_address, "through-lanes", range(PARTITIONS), count)
    assert_read_back_in_order(messages, reported, PARTITIONS, count)


def test_lanes_outside_their_range_are_refused(capsys):
    for lanes in ("0", "65"):
        with pytest.raises(SystemExit):
            gateway_args(["--kafka-listen", "127.0.0.1:0", "--kafka-lanes", lanes])
        assert "must be 1 to 64" in capsys.readouterr().err
    assert gateway_args(["--kafka-lanes", "4"]).kafka_lanes == 4
    listener = KafkaListener.__new__(KafkaListener)
    listener.listen, listener.lanes = "127.0.0.1:65535", 2
    with pytest.raises(ValueError, match="pass 65535"):
        listener.start()


def test_a_lane_whose_port_is_taken_leaves_no_lane_bound():
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        listener = KafkaListener.__new__(KafkaListener)
        listener.listen = f"127.0.0.1:{taken.getsockname()[1] - 1}"
        listener.lanes, listener._servers, listener.ports = 2, [], []
        with pytest.raises(OSError):
            listener.start()  # lane 1 is the taken port (or lane 0's is taken too)
        assert listener._servers == [] and listener.ports == []
    finally:
        taken.close()


def test_lanes_are_advertised_at_the_advertised_port_and_the_ports_after_it(tmp_path):
    """Behind a proxy or a Kubernetes Service the lanes are reached at the advertised port
    and the ones after it, in lane order, wherever they are bound here."""
    advertised_port = 19092
    cluster = LocalCluster(
        tmp_path,
        nodes=1,
        kafka_lanes=2,
        kafka_advertised_listener=f"kafka.example:{advertised_port}",
    )
    try:
        cluster.admin.create_topic("advertised", 1, 1)
        answer = metadata(cluster.kafka_address, "advertised")
        brokers = sorted((b.host, b.port, b.node_id) for b in answer.brokers)
        # The one node, 1, at the first lane: the advertised port.
        assert brokers == [("kafka.example", advertised_port, 1)]
        [partition] = answer.topics[0].partitions
        assert partition.leader_id == 1
    finally:
        cluster.close()
