"""A Kafka producer through a storage leader's crash: librdkafka, idempotent with acks=all,
keeps producing while the leader of its partition is stopped without a controlled shutdown;
the gateway's answers (NOT_LEADER_OR_FOLLOWER, as a Kafka broker's) are retried, and every
record is read back once. With lanes (listener.py), the new storage leader's lane is another
broker, and the reader afterwards is sent to it."""

from __future__ import annotations

import threading
import time

import confluent_kafka
import pytest

from tests.cluster import LocalCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def test_an_idempotent_producer_loses_and_repeats_nothing_when_the_leader_dies(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=3)
    try:
        cluster.admin.create_topic("survives", 1, 3)
        victim = cluster.gateway.registry.route("survives", 0).leader
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": cluster.kafka_address,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 60_000,
            }
        )
        errors: list[object] = []
        acknowledged: list[int] = []
        sent = threading.Event()

        def produce() -> None:
            for i in range(3000):
                producer.produce(
                    "survives",
                    value=b"%d" % i,
                    on_delivery=lambda err, msg: (
                        errors.append(err) if err else acknowledged.append(int(msg.value()))
                    ),
                )
                producer.poll(0)
                if i == 1000:
                    sent.set()
                time.sleep(0.0005)
            producer.flush(60)

        writer = threading.Thread(target=produce)
        writer.start()
        assert sent.wait(30)
        cluster.stop_node(victim, controlled=False)
        writer.join(90)
        assert not writer.is_alive()
        assert errors == []
        assert sorted(acknowledged) == list(range(3000))
        assert wait_until(lambda: cluster.gateway.registry.route("survives", 0).leader != victim)
        listener = cluster.gateway.kafka_listener
        assert listener is not None
        successor = cluster.gateway.registry.route("survives", 0).leader
        # Each node is a broker at a lane of its own (kafka/brokers.py).
        assert listener.accepted_connections[victim] > 0

        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": cluster.kafka_address,
                "group.id": "survivor-reader",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([confluent_kafka.TopicPartition("survives", 0, 0)])
        read: list[int] = []
        deadline = time.monotonic() + 30
        while len(read) < 3000 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read.append(int(message.value()))
        consumer.close()
        assert read == list(range(3000))  # all of them, once each, in order
        # The new leader's lane is another broker, and the reader's metadata sent it there.
        # (The producer's lane is the one its NOT_LEADER answers' hints sent it to.)
        assert listener.accepted_connections.get(successor, 0) > 0
    finally:
        cluster.close()
