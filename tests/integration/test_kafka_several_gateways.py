"""Kafka clients against several gateways sharing etcd (real processes). Every gateway lists
the storage nodes as brokers, each at its own lane there (the gateway's Kafka port + the node
id, kafka/brokers.py), and names the same leader for each partition; librdkafka bootstrapped
from one gateway writes and reads through its lanes, and goes on through the survivor when the
other is killed. A transaction coordinated by the killed gateway, logged PrepareCommit, is
taken up by the survivor (the controller) without any client asking, and resumed."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from tests.kafka_wire import KafkaWire, metadata
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 8
TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 10
NODES = (1, 2, 3)


def view(address: str, topic: str):
    """(broker ids, each partition's leader) as one gateway answers."""
    answer = metadata(address, topic)
    leaders = {p.partition_index: p.leader_id for p in answer.topics[0].partitions}
    return sorted(b.node_id for b in answer.brokers), leaders


def placed(address: str, topic: str) -> dict[int, str]:
    """{broker id: its address} as one gateway answers."""
    return {b.node_id: f"{b.host}:{b.port}" for b in metadata(address, topic).brokers}


def lanes_at(kafka_address: str) -> dict[int, str]:
    host, port = kafka_address.rsplit(":", 1)
    return {n: f"{host}:{int(port) + n}" for n in NODES}


def transaction_coordinator(kafka_address: str, transactional_id: str) -> str:
    """host:port of the transactional id's coordinator, as one gateway answers."""
    with KafkaWire(kafka_address) as wire:
        answer = wire.request(
            FindCoordinatorRequest[3](key=transactional_id, key_type=1),
            3,
            FindCoordinatorResponse,
        )
    assert answer.error_code == 0, answer
    return f"{answer.host}:{answer.port}"


def on_gateway(broker: str, kafka_address: str) -> bool:
    """Whether a broker's host:port is one of the gateway's (its listener or a lane)."""
    return broker in {kafka_address, *lanes_at(kafka_address).values()}


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


def test_each_gateway_lists_the_nodes_at_its_lanes_and_the_survivor_serves_on(tmp_path):
    cluster = EtcdBackedCluster(tmp_path)
    try:
        with cluster.admin(0) as admin:
            admin.create_topic("spread", PARTITIONS, 3)
        assert wait_until(
            lambda: all(placed(a, "spread") == lanes_at(a) for a in cluster.kafka_addresses),
            TAKEOVER_S,
        )
        both = [view(a, "spread") for a in cluster.kafka_addresses]
        ids_seen = {metadata(a, "spread").cluster_id for a in cluster.kafka_addresses}
        assert len(ids_seen) == 1 and None not in ids_seen  # one cluster id from both
        assert both[0] == both[1]  # every gateway names the same leaders
        with cluster.admin(0) as admin:
            described = admin.describe_topic("spread")
        assert both[0][1] == {p.partition: p.leader for p in described.partitions}

        first = [b"first-%d" % i for i in range(200)]
        assert produce(cluster.kafka_addresses[0], "spread", first) == [None] * 200

        # A transaction through the gateway to be killed: asked first, it coordinates the id.
        coordinated_by = transaction_coordinator(cluster.kafka_addresses[1], "spread-txn")
        assert on_gateway(coordinated_by, cluster.kafka_addresses[1])
        assert transaction_coordinator(cluster.kafka_addresses[0], "spread-txn") == coordinated_by
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.kafka_addresses[1], "transactional.id": "spread-txn"}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(PARTITIONS):
            producer.produce("spread", value=b"txn-%d" % i, partition=i)
        producer.commit_transaction(30)
        del producer

        cluster.gateways[1].kill()
        # The survivor (the controller) adopts the dead coordinator's log partition because
        # a transaction in it is unfinished, and writes its markers (no client asks).
        assert wait_until(
            lambda: (
                "resuming PrepareCommit of transactional id spread-txn" in cluster.log("gateway-0")
                or "CompleteCommit" in cluster.log("gateway-0")
            ),
            TAKEOVER_S,
        )
        survivor_names = transaction_coordinator(cluster.kafka_addresses[0], "spread-txn")
        assert on_gateway(survivor_names, cluster.kafka_addresses[0])
        survivor = cluster.kafka_addresses[0]
        assert placed(survivor, "spread") == lanes_at(survivor)  # nothing moved
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
        while len(read) < 400 + PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read.append(message.value())
        consumer.close()
        # Read uncommitted (until nodes write markers, read_committed would wait on them).
        assert sorted(v for v in read if not v.startswith(b"txn-")) == sorted(first + second)
    finally:
        cluster.close()
