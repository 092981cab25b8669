"""Kafka's classic-protocol clients in consumer groups, for the tests of
tests/integration/test_kafka_group*.py: topics, producing, librdkafka consumers committing
each record they read, a JoinGroup at the wire."""

from __future__ import annotations

from collections import Counter

import confluent_kafka
import kafka
from kafka.protocol.consumer.group import JoinGroupRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from tests.authorizer_modes import GROUP_GRANTS, cluster_in_mode
from tests.waiting import wait_until

TIMEOUT_S = 30
UNKNOWN_MEMBER_ID = kafka.errors.UnknownMemberIdError.errno
GROUP_AUTHORIZATION_FAILED = kafka.errors.GroupAuthorizationFailedError.errno
TOPIC_AUTHORIZATION_FAILED = kafka.errors.TopicAuthorizationFailedError.errno
PARTITIONS = 4


def create_topic(cluster, topic, partitions=PARTITIONS):
    cluster.admin.create_topic(topic, partitions, 3)


def produce(cluster, topic, values, partitions=PARTITIONS, **config):
    """acks=all, each value to partition value % partitions."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "acks": "all", **config}
    )
    for value in values:
        producer.produce(topic, value=str(value).encode(), partition=value % partitions)
    assert producer.flush(TIMEOUT_S) == 0


def rdkafka_consumer(cluster, group, **config):
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "heartbeat.interval.ms": 200,
            "session.timeout.ms": 10_000,
            **config,
        }
    )


class Reader:
    """Polls one librdkafka consumer, committing each record synchronously after reading
    it: a record read twice is one whose first reader's commit failed (a rebalance cut in)."""

    def __init__(self, consumer, seen: Counter, uncommitted: set[int]) -> None:
        self.consumer = consumer
        self.seen = seen
        self.uncommitted = uncommitted

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is None or message.error() is not None:
            return
        value = int(message.value())
        self.seen[value] += 1
        try:
            self.consumer.commit(message=message, asynchronous=False)
        except confluent_kafka.KafkaException:
            self.uncommitted.add(value)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(readers, predicate, timeout_s=TIMEOUT_S) -> bool:
    def step():
        for reader in readers:
            reader.poll()
        return predicate()

    return wait_until(step, timeout_s, interval_s=0)


def join_request(version, member_id="", *, instance=None):
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(
        name="range",
        metadata=ConsumerProtocolSubscription(version=0, topics=["wire-group"]).encode(),
    )
    return JoinGroupRequest[version](
        group_id=f"wire-v{version}",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[protocol],
    )


def cluster_per_authorizer_mode(request, tmp_path_factory):
    """The body of the group modules' cluster fixture (module scope, params=AUTHORIZER_MODES):
    their tests with the authorizer off, then on (GROUP_GRANTS to ANONYMOUS, the Kafka
    listener's principal without SASL)."""
    c = cluster_in_mode(
        tmp_path_factory.mktemp("kafka-groups"), request.param, GROUP_GRANTS, nodes=3
    )
    yield c
    c.close()
