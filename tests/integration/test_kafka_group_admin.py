"""Kafka groups seen from outside their members: offsets cross between the Kafka and gRPC APIs
both ways; seglog's CLI and Kafka's admin clients (kafka-python, confluent-kafka) list,
describe and delete groups and offsets; a Kafka member and seglog's own consumers do not
share a group. The authorizer off, then on."""

from __future__ import annotations

import io
from collections import Counter

import confluent_kafka
import confluent_kafka.admin
import kafka
import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from kafka.protocol.consumer.group import (
    JoinGroupResponse,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
)
from kafka.structs import TopicPartition as KafkaTopicPartition

from seglog.cli.groups import describe_group
from seglog.cli.main import build_parser
from seglog.client.consumer import Consumer
from seglog.client.structs import OffsetAndMetadata, TopicPartition
from tests.authorizer_modes import AUTHORIZER_MODES
from tests.kafka_group_clients import (
    PARTITIONS,
    TIMEOUT_S,
    Reader,
    cluster_per_authorizer_mode,
    create_topic,
    join_request,
    poll_until,
    produce,
    rdkafka_consumer,
)
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until


@pytest.fixture(scope="module", params=AUTHORIZER_MODES)
def cluster(request, tmp_path_factory):
    yield from cluster_per_authorizer_mode(request, tmp_path_factory)


def test_offsets_cross_between_librdkafka_and_seglog_consumers(cluster):
    topic = "crossing"
    create_topic(cluster, topic)
    # librdkafka commits, seglog reads.
    committer = rdkafka_consumer(cluster, "crossers")
    committer.commit(
        offsets=[confluent_kafka.TopicPartition(topic, p, 10 + p) for p in range(PARTITIONS)],
        asynchronous=False,
    )
    committer.close()
    reader = Consumer(cluster.address, group_id="crossers")
    try:
        seen = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
        assert {tp.partition: om.offset for tp, om in seen.items()} == {
            p: 10 + p for p in range(PARTITIONS)
        }
        # seglog commits, librdkafka reads.
        reader.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        reader.commit({TopicPartition(topic, p): OffsetAndMetadata(20 + p, "") for p in range(2)})
    finally:
        reader.close(autocommit=False)
    checker = rdkafka_consumer(cluster, "crossers")
    try:
        read = checker.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
    finally:
        checker.close()
    assert [tp.offset for tp in read] == [20, 21, 12, 13]


def test_seglogs_cli_describes_a_kafka_groups_members_and_assignment(cluster):
    topic = "described-group"
    create_topic(cluster, topic)
    produce(cluster, topic, range(8))
    seen: Counter[int] = Counter()
    reader = Reader(rdkafka_consumer(cluster, "describers"), seen, set())
    reader.consumer.subscribe([topic])
    try:
        assert poll_until([reader], lambda: len(seen) == 8)
        out = io.StringIO()
        args = build_parser().parse_args(
            ["groups", "describe", "--bootstrap", cluster.address, "describers"]
        )
        assert describe_group(args, out) == 0
        (member_id,) = cluster.gateway.coordinator.snapshot("describers").members
    finally:
        reader.consumer.close()
    lines = out.getvalue().splitlines()
    assert "State: Stable" in lines[0] and "Strategy: range" in lines[0]
    rows = [line.split() for line in lines[2:]]
    assert [(row[0], row[1], row[2], row[5]) for row in rows] == [
        (topic, str(p), "2", member_id) for p in range(PARTITIONS)
    ]


def test_kafka_admin_clients_list_describe_and_delete_groups_and_offsets(cluster):
    topic = "administered"
    create_topic(cluster, topic)
    produce(cluster, topic, range(8))
    seen: Counter[int] = Counter()
    reader = Reader(rdkafka_consumer(cluster, "administered-readers"), seen, set())
    reader.consumer.subscribe([topic])
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_address)
    try:
        assert poll_until([reader], lambda: len(seen) == 8)
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["administered-readers"]["protocol_type"] == "consumer"
        assert listed["administered-readers"]["group_state"] == "Stable"
        described = admin.describe_groups(["administered-readers"])["administered-readers"]
        assert described["group_state"] == "Stable"
        assert described["protocol_data"] == "range"
        (member,) = described["members"]
        assignment = member["member_assignment"]["assigned_partitions"]
        assert assignment == [{"topic": topic, "partitions": list(range(PARTITIONS))}]
        # Offsets of a topic the group reads cannot be deleted; the group is not empty.
        refused = admin.delete_group_offsets(
            "administered-readers", [KafkaTopicPartition(topic, 0)]
        )
        assert refused[KafkaTopicPartition(topic, 0)] is kafka.errors.GroupSubscribedToTopicError
        refusal = admin.delete_groups(["administered-readers"])["administered-readers"]
        assert refusal == "NonEmptyGroupError"
        reader.consumer.close()
        assert wait_until(
            lambda: (
                admin.describe_groups(["administered-readers"])["administered-readers"][
                    "group_state"
                ]
                == "Empty"
            )
        )
        deleted = admin.delete_group_offsets(
            "administered-readers", [KafkaTopicPartition(topic, 0)]
        )
        assert deleted[KafkaTopicPartition(topic, 0)] is kafka.errors.NoError
        remaining = cluster.gateway.offsets.committed("administered-readers")
        assert sorted(p for _, p in remaining) == [1, 2, 3]
        assert admin.delete_groups(["administered-readers"])["administered-readers"] == "OK"
        assert cluster.gateway.offsets.committed("administered-readers") == {}
        gone = admin.describe_groups(["administered-readers"])["administered-readers"]
        assert gone["group_state"] == "Dead"
    finally:
        admin.close()


def test_confluent_admin_lists_and_describes_a_group(cluster):
    topic = "confluent-administered"
    create_topic(cluster, topic)
    produce(cluster, topic, range(4))
    seen: Counter[int] = Counter()
    reader = Reader(rdkafka_consumer(cluster, "confluent-administered"), seen, set())
    reader.consumer.subscribe([topic])
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.kafka_address})
    try:
        assert poll_until([reader], lambda: len(seen) == 4)
        listed = admin.list_consumer_groups().result(timeout=TIMEOUT_S)
        assert "confluent-administered" in {g.group_id for g in listed.valid}
        (future,) = admin.describe_consumer_groups(["confluent-administered"]).values()
        described = future.result(timeout=TIMEOUT_S)
        (member,) = described.members
        assert {tp.partition for tp in member.assignment.topic_partitions} == set(range(PARTITIONS))
        assert str(described.state).endswith("STABLE")
    finally:
        reader.consumer.close()


# -- the protocol's versions, at the wire ------------------------------------------------------


def test_a_kafka_member_cannot_join_a_group_of_seglog_consumers(cluster):
    create_topic(cluster, "mixed")
    seglog_member = Consumer(cluster.address, group_id="wire-v5", client_id="mixed-reader")
    seglog_member.subscribe(["mixed"])
    try:
        assert wait_until(
            lambda: seglog_member.poll_records(timeout_ms=100) == [] and seglog_member.assignment()
        )
        with KafkaWire(cluster.kafka_address) as wire:
            refused = wire.request(join_request(5), 5, JoinGroupResponse)
            described = wire.request(
                DescribeGroupsRequest[5](groups=["wire-v5", "no-such-group"]),
                5,
                DescribeGroupsResponse,
            )
    finally:
        seglog_member.close(autocommit=False)
    assert refused.error_code == kafka.errors.InconsistentGroupProtocolError.errno
    # Kafka's tools read a seglog group: the coordinator's assignment in the consumer
    # protocol's bytes.
    seglog_group, absent = described.groups
    assert (seglog_group.group_state, seglog_group.protocol_type) == ("Stable", "consumer")
    (member,) = seglog_group.members
    assert member.client_id == "mixed-reader"  # what kafka-consumer-groups shows as CLIENT-ID
    assignment = ConsumerProtocolAssignment.decode(member.member_assignment)
    assert [(a.topic, a.partitions) for a in assignment.assigned_partitions] == [
        ("mixed", list(range(PARTITIONS)))
    ]
    assert (absent.error_code, absent.group_state) == (0, "Dead")


# -- authorization ------------------------------------------------------------------------------
