"""Kafka clients in KIP-848 consumer groups, for the tests of
tests/integration/test_kafka_consumer_groups.py: librdkafka consumers polling on threads,
what they read, the coordinator's view of who holds what, and heartbeats at the wire."""

from __future__ import annotations

import threading
import uuid

import confluent_kafka

from services.gateway.kafka.consumer_group_apis import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tests.kafka_wire import KafkaWire

TIMEOUT_S = 60


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(cluster, topic, values, partitions):
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address, "acks": "all"})
    for value in values:
        producer.produce(topic, value=str(value).encode(), partition=value % partitions)
    assert producer.flush(TIMEOUT_S) == 0


def consumer(cluster, group_id, **config):
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": group_id,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **config,
        }
    )


def describe(cluster, group_id):
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(
            ConsumerGroupDescribeRequest[1](
                group_ids=[group_id], include_authorized_operations=False
            ),
            1,
            ConsumerGroupDescribeResponse,
        )
    return answer.groups[0]


class Ledger:
    """What a group's members read, in the order they read it, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read: list[tuple[int, int, str]] = []  # partition, offset, member

    def count(self) -> int:
        with self.lock:
            return len(self.read)


class OwnershipWatch:
    """Samples the coordinator's view of the group on a thread: a partition is never held
    (assigned, or still to revoke) by two members at once."""

    def __init__(self, cluster, group_id) -> None:
        self.groups = cluster.gateway.consumer_groups
        self.group_id = group_id
        self.double: list[str] = []
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ownership-watch")
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.01):
            try:
                group = self.groups.describe(self.group_id)
            except Exception:  # not made yet
                continue
            self.samples += 1
            holder: dict[tuple[str, int], str] = {}
            for member in group.members.values():
                for held in (member.assigned, member.pending_revocation):
                    for topic_id, partitions in held.items():
                        for p in partitions:
                            other = holder.setdefault((topic_id, p), member.member_id)
                            if other != member.member_id:
                                self.double.append(f"{p}: {other} and {member.member_id}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(TIMEOUT_S)


class Member:
    """A librdkafka consumer polling on its own thread, committing each record it reads."""

    def __init__(self, cluster, group_id, topic, name, ledger, **config) -> None:
        self.name = name
        self.ledger = ledger
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.consumer = consumer(cluster, group_id, **config)
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, name=name)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            message = self.consumer.poll(0.1)
            if message is None:
                continue
            if message.error():
                self.errors.append(str(message.error()))
                continue
            with self.ledger.lock:
                self.ledger.read.append((message.partition(), message.offset(), self.name))
            self.consumer.commit(message, asynchronous=False)
        self.consumer.close()  # leaves the group (member epoch -1)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(TIMEOUT_S)


def heartbeat(wire, group_id, member_id, epoch, **fields):
    request = ConsumerGroupHeartbeatRequest[1](
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=fields.pop("rebalance_timeout_ms", 30000 if epoch == 0 else -1),
        subscribed_topic_names=fields.pop("topics", None),
        subscribed_topic_regex=fields.pop("regex", None),
        server_assignor=fields.pop("assignor", None),
        topic_partitions=fields.pop("owned", [] if epoch == 0 else None),
    )
    return wire.request(request, 1, ConsumerGroupHeartbeatResponse)
