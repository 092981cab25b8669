"""Kafka clients against several gateways sharing etcd (real processes). With a lane per node
over the gateways, every gateway's Metadata lists the storage nodes as brokers, each at a lane
of its own, the same in every answer; with fewer lanes it lists the live gateways as brokers
and names the same leader for each partition, spread over them. librdkafka bootstrapped from
one gateway writes and reads through both, and goes on through the survivor when the other is
killed."""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from services.gateway.kafka.brokers import broker_id
from tests.kafka_wire import metadata
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 8
TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 10


def view(address: str, topic: str):
    """(broker ids, each partition's leader) as one gateway answers."""
    answer = metadata(address, topic)
    leaders = {p.partition_index: p.leader_id for p in answer.topics[0].partitions}
    return sorted(b.node_id for b in answer.brokers), leaders


def placed(address: str, topic: str) -> dict[int, str]:
    """{broker id: its address} as one gateway answers."""
    return {b.node_id: f"{b.host}:{b.port}" for b in metadata(address, topic).brokers}


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[object]:
    """Delivery errors of acks=all records (None each when written)."""
    outcome: list[object] = []
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    )
    for i, value in enumerate(values):
        producer.produce(
            topic, value=value, partition=i % PARTITIONS, on_delivery=lambda e, m: outcome.append(e)
        )
    producer.flush(60)
    return outcome


def test_gateways_share_leadership_and_the_survivor_takes_it_all(tmp_path):
    cluster = EtcdBackedCluster(tmp_path)
    try:
        with cluster.admin(0) as admin:
            admin.create_topic("spread", PARTITIONS, 3)
        ids = sorted(broker_id(a) for a in cluster.kafka_addresses)
        assert wait_until(
            lambda: all(view(a, "spread")[0] == ids for a in cluster.kafka_addresses),
            TAKEOVER_S,
        )
        both = [view(a, "spread") for a in cluster.kafka_addresses]
        ids_seen = {metadata(a, "spread").cluster_id for a in cluster.kafka_addresses}
        assert len(ids_seen) == 1 and None not in ids_seen  # one cluster id from both
        assert both[0] == both[1]  # every gateway names the same leaders
        assert set(both[0][1].values()) == set(ids)  # spread over both

        first = [b"first-%d" % i for i in range(200)]
        assert produce(cluster.kafka_addresses[0], "spread", first) == [None] * 200

        cluster.gateways[1].kill()
        survivor = cluster.kafka_addresses[0]
        alone = broker_id(survivor)
        assert wait_until(lambda: view(survivor, "spread")[0] == [alone], TAKEOVER_S)
        assert set(view(survivor, "spread")[1].values()) == {alone}
        second = [b"second-%d" % i for i in range(200)]
        assert produce(survivor, "spread", second) == [None] * 200

        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": survivor,
                "group.id": "spread-reader",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([confluent_kafka.TopicPartition("spread", p, 0) for p in range(PARTITIONS)])
        read: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(read) < 400 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read.append(message.value())
        consumer.close()
        assert sorted(read) == sorted(first + second)
    finally:
        cluster.close()


def test_gateways_with_a_lane_per_node_present_each_node_at_a_lane_of_its_own(tmp_path):
    """Two gateways of two lanes each and three nodes: both answer the three nodes as brokers,
    the i-th registered node at gateway i mod 2 (by broker id), lane i div 2, and each
    partition led by its storage leader; a producer bootstrapped from one writes through
    every lane it is given."""
    cluster = EtcdBackedCluster(tmp_path, kafka_lanes=2)
    try:
        with cluster.admin(0) as admin:
            admin.create_topic("laned", PARTITIONS, 3)
        gateways = sorted(cluster.kafka_lanes_of, key=lambda lanes: broker_id(lanes[0]))
        expected = {n: gateways[i % 2][i // 2] for i, n in enumerate((1, 2, 3))}
        assert wait_until(
            lambda: all(placed(a, "laned") == expected for a in cluster.kafka_addresses),
            TAKEOVER_S,
        )
        both = [view(a, "laned") for a in cluster.kafka_addresses]
        assert both[0] == both[1]
        with cluster.admin(0) as admin:
            described = admin.describe_topic("laned")
        assert both[0][1] == {p.partition: p.leader for p in described.partitions}
        values = [b"laned-%d" % i for i in range(200)]
        assert produce(cluster.kafka_addresses[0], "laned", values) == [None] * 200
    finally:
        cluster.close()
