"""The fault proxy with Kafka's framing (tests/faults/proxy.py) in front of a real gateway's
Kafka listener and its node lane, advertised to librdkafka in their place (as the
transactional campaign sets it up): a dropped answer is a Produce the gateway wrote whose
client saw its connection fail; a delayed answer arrives late; healed, answers flow again."""

from __future__ import annotations

import time

import confluent_kafka
import pytest

from tests.cluster import LocalCluster
from tests.faults.proxy import FaultProxy
from tests.ports import free_port_run
from tests.rdkafka import rdkafka_consume

TOPIC = "proxied"
LANES = 2  # the listener itself and node 1's lane (its port + 1)
FLUSH_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    listen, advertised = free_port_run(LANES), free_port_run(LANES)
    proxies = [
        FaultProxy(f"127.0.0.1:{listen + lane}", "kafka", advertised + lane)
        for lane in range(LANES)
    ]
    cluster = LocalCluster(
        tmp_path_factory.mktemp("kafka-proxy"),
        nodes=1,
        kafka_listen=f"127.0.0.1:{listen}",
        kafka_advertised_listener=f"127.0.0.1:{advertised}",
    )
    cluster.admin.create_topic(TOPIC, 1, 1)
    try:
        yield cluster, proxies, f"127.0.0.1:{advertised}"
    finally:
        for proxy in proxies:
            proxy.close()
        cluster.close()


class OneProducer:
    """A producer sending one record at a time without retries, its connections to the
    bootstrap broker and the leader's lane kept (so an answer dropped is a Produce's)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": False,
                "acks": "all",
                "retries": 0,
                "message.timeout.ms": 20000,
            }
        )

    def send(self, value: bytes) -> tuple[confluent_kafka.KafkaError | None, float]:
        """The record's delivery error (None: written) and how long its answer took."""
        reports: list = []
        started = time.monotonic()
        self.producer.produce(TOPIC, value=value, on_delivery=lambda err, msg: reports.append(err))
        assert self.producer.flush(FLUSH_TIMEOUT_S) == 0
        return reports[0], time.monotonic() - started


def test_a_dropped_kafka_answer_was_written_and_the_next_is_answered(proxied):
    _, proxies, bootstrap = proxied
    producer = OneProducer(bootstrap)
    assert producer.send(b"before")[0] is None
    lane = proxies[1]  # node 1's: the partition's leader
    lane.drop_answers(1)
    error, _ = producer.send(b"landed")
    lane.heal()
    assert lane.answers_dropped == 1
    assert error is not None  # its client saw the connection fail...
    assert producer.send(b"after")[0] is None
    # ...and yet it was written: the gateway handled what the proxy cut the answer of.
    read = [m.value() for m in rdkafka_consume(bootstrap, TOPIC, [0], 3)]
    assert read == [b"before", b"landed", b"after"]


def test_kafka_answers_are_delayed_until_healed(proxied):
    _, proxies, bootstrap = proxied
    producer = OneProducer(bootstrap)
    assert producer.send(b"warm")[0] is None
    for proxy in proxies:
        proxy.delay_answers(1500)
    try:
        error, took_s = producer.send(b"slow")
    finally:
        for proxy in proxies:
            proxy.heal()
    assert error is None
    assert took_s >= 1.5
    error, took_s = producer.send(b"quick")
    assert error is None and took_s < 1.5


def test_framing_is_checked():
    with pytest.raises(ValueError, match="framing"):
        FaultProxy("127.0.0.1:1", "http3")
