"""Topic ids (KIP-516) end to end, on one cluster of real in-process gateway and node: the id
made at creation is the one Metadata v10+, CreateTopics v7 and both Kafka client libraries
see, the one each replica's `partition.metadata` holds byte for byte as Kafka writes it, and
it survives gateway and node restarts; Metadata v12 and DeleteTopics v6 find topics by it;
and a topic deleted and made again under the same name while its node was down starts empty
on that node, the old topic's records set aside and never read."""

from __future__ import annotations

import uuid

import confluent_kafka
import grpc
import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import errors as kafka_errors
from kafka.protocol.admin import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from seglog.storage import partition_metadata
from seglog.storage.meta_properties import random_uuid
from seglog.v1 import storage_pb2, storage_pb2_grpc
from services.gateway.kafka.topic_ids import from_wire, to_wire
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until

# Long enough that a node stopped without its controlled shutdown still counts as live while
# a test deletes and recreates a topic (so the new topic is placed on it, as on a node whose
# crash the registry has not noticed yet); nothing here waits for a session to expire.
SESSION_TIMEOUT_MS = 60_000
RESULT_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("topic-ids"), nodes=1, session_timeout_ms=SESSION_TIMEOUT_MS
    )
    yield c
    c.close()


def _registry_id(cluster, topic: str) -> str:
    return cluster.gateway.registry.topic(topic).topic_id


def _metadata(cluster, version: int, topics: list[MetadataRequest.MetadataRequestTopic]):
    with KafkaWire(cluster.kafka_address) as wire:
        request = MetadataRequest[version](
            topics=topics,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return wire.request(request, version, MetadataResponse)


def _partition_dir(cluster, topic: str, partition: int = 0):
    return cluster.nodes[1].logs.get_log(topic, partition).directory


def _served(cluster, topic: str, partition: int = 0) -> bool:
    """The node hosts the partition under the registry's id and leads it."""
    node = cluster.nodes.get(1)
    if node is None:
        return False
    held = node.replicas.partition_if_hosted(topic, partition)
    return (
        held is not None
        and held.is_leader
        and node.logs.topic_id(topic, partition) == _registry_id(cluster, topic)
    )


def test_the_id_is_made_once_and_every_client_and_the_partition_file_agree(cluster):
    cluster.admin.create_topic("ids-agree", 2, 1)
    topic_id = _registry_id(cluster, "ids-agree")
    assert len(topic_id) == 22 and topic_id != partition_metadata.ZERO_UUID
    assert cluster.gateway.registry.topic_name_of(topic_id) == "ids-agree"
    assert cluster.admin.describe_topic("ids-agree").topic_id == topic_id  # the gRPC API's
    # Metadata v10+ answers it (v9 has no field for it).
    (answered,) = _metadata(
        cluster, 10, [MetadataRequest.MetadataRequestTopic(name="ids-agree")]
    ).topics
    assert (answered.error_code, from_wire(answered.topic_id)) == (0, topic_id)
    # librdkafka and kafka-python, each through its own Metadata.
    admin = AdminClient({"bootstrap.servers": cluster.kafka_address})  # alive until answered
    described = admin.describe_topics(confluent_kafka.TopicCollection(["ids-agree"]))
    seen = described["ids-agree"].result(RESULT_TIMEOUT_S).topic_id
    # (librdkafka prints ids in standard base64, Kafka in URL-safe: the bits are compared.)
    bits = (seen.get_most_significant_bits(), seen.get_least_significant_bits())
    wire = to_wire(topic_id).int
    assert tuple(b & (2**64 - 1) for b in bits) == (wire >> 64, wire & (2**64 - 1))
    python_admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_address)
    try:
        (by_name,) = python_admin.describe_topics(["ids-agree"])
        assert from_wire(uuid.UUID(by_name["topic_id"])) == topic_id  # its to_json form
        # Metadata v12 by id: the same topic, by its name.
        (by_id,) = python_admin.describe_topics([to_wire(topic_id)])
        assert (by_id["name"], by_id["error_code"]) == ("ids-agree", 0), by_id
    finally:
        python_admin.close()
    # Each partition directory holds it exactly as Kafka's PartitionMetadataFile writes it.
    for partition in (0, 1):
        assert wait_until(lambda p=partition: _served(cluster, "ids-agree", p))
        directory = _partition_dir(cluster, "ids-agree", partition)
        written = (directory / "partition.metadata").read_bytes()
        assert written == b"version: 0\ntopic_id: " + topic_id.encode()
        assert not (directory / "partition.metadata.tmp").exists()


def test_ids_survive_gateway_and_node_restarts(cluster):
    cluster.admin.create_topic("ids-restart", 1, 1)
    topic_id = _registry_id(cluster, "ids-restart")
    cluster.restart_gateway()
    assert _registry_id(cluster, "ids-restart") == topic_id
    cluster.stop_node(1)
    cluster.start_node(1)
    assert wait_until(lambda: _served(cluster, "ids-restart"))
    assert partition_metadata.read(_partition_dir(cluster, "ids-restart")) == topic_id
    (answered,) = _metadata(
        cluster, 12, [MetadataRequest.MetadataRequestTopic(name="ids-restart")]
    ).topics
    assert from_wire(answered.topic_id) == topic_id


def test_metadata_v12_by_id_and_delete_topics_by_id(cluster):
    cluster.admin.create_topic("ids-by-id", 1, 1)
    topic_id = to_wire(_registry_id(cluster, "ids-by-id"))
    unknown = uuid.UUID(int=7)
    found, missing = _metadata(
        cluster,
        12,
        [
            MetadataRequest.MetadataRequestTopic(name=None, topic_id=topic_id),
            MetadataRequest.MetadataRequestTopic(name=None, topic_id=unknown),
        ],
    ).topics
    assert (found.error_code, found.name, found.topic_id) == (0, "ids-by-id", topic_id)
    assert len(found.partitions) == 1
    assert (missing.error_code, missing.name, missing.topic_id) == (
        kafka_errors.UnknownTopicIdError.errno,
        None,
        unknown,
    )
    # Ids are v12's: v11 is refused as Kafka's broker refuses it.
    (refused,) = _metadata(
        cluster, 11, [MetadataRequest.MetadataRequestTopic(name=None, topic_id=topic_id)]
    ).topics
    assert refused.error_code == kafka_errors.InvalidRequestError.errno
    with KafkaWire(cluster.kafka_address) as wire:
        both = wire.request(
            DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name="ids-by-id", topic_id=topic_id)],
                timeout_ms=5000,
            ),
            6,
            DeleteTopicsResponse,
        )
        assert [r.error_code for r in both.responses] == [kafka_errors.InvalidRequestError.errno]
        assert "ids-by-id" in cluster.gateway.registry.topics
        deleted = wire.request(
            DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=topic_id)],
                timeout_ms=5000,
            ),
            6,
            DeleteTopicsResponse,
        )
    ((name, answered_id, code),) = [(r.name, r.topic_id, r.error_code) for r in deleted.responses]
    assert (name, answered_id, code) == ("ids-by-id", topic_id, 0)
    assert "ids-by-id" not in cluster.gateway.registry.topics


def _produce(cluster, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(RESULT_TIMEOUT_S) == 0


def _first_value(cluster, topic: str) -> bytes:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_address, "group.id": f"{topic}-reader"}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got: list[bytes] = []

        def read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
            return bool(got)

        assert wait_until(read, RESULT_TIMEOUT_S)
        return got[0]
    finally:
        consumer.close()


def test_a_topic_made_again_while_its_node_was_down_starts_empty_there(cluster):
    cluster.admin.create_topic("ids-again", 1, 1)
    _produce(cluster, "ids-again", [b"old-%d" % i for i in range(5)])
    old_id = _registry_id(cluster, "ids-again")
    old_dir = _partition_dir(cluster, "ids-again")
    # The node goes down uncontrolled; the registry still counts it live (its session has
    # not expired), so the topic made again is placed on it, as Kafka's controller would.
    cluster.stop_node(1, controlled=False)
    cluster.admin.delete_topic("ids-again")
    cluster.admin.create_topic("ids-again", 1, 1)
    new_id = _registry_id(cluster, "ids-again")
    assert new_id != old_id
    assert cluster.gateway.registry.image.partition(("ids-again", 0)).replicas == [1]
    cluster.start_node(1)
    assert wait_until(lambda: _served(cluster, "ids-again"))
    node = cluster.nodes[1]
    log = node.logs.get_log("ids-again", 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert partition_metadata.read(log.directory) == new_id
    # The old topic's records are set aside on disk (an operator may still want them),
    # under its own id, not deleted and not served.
    (aside,) = [p for p in old_dir.parent.iterdir() if p.name.startswith("ids-again-0-stray")]
    assert partition_metadata.read(aside) == old_id
    _produce(cluster, "ids-again", [b"new-0"])
    assert _first_value(cluster, "ids-again") == b"new-0"
    low, high = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_address, "group.id": "ids-again-offsets"}
    ).get_watermark_offsets(confluent_kafka.TopicPartition("ids-again", 0), RESULT_TIMEOUT_S)
    assert (low, high) == (0, 1)


def _describe_partitions(cluster, names, limit, cursor=None):
    request_class = DescribeTopicPartitionsRequest
    with KafkaWire(cluster.kafka_address) as wire:
        return wire.request(
            request_class(
                topics=[request_class.TopicRequest(name=n) for n in names],
                response_partition_limit=limit,
                cursor=cursor,
            ),
            0,
            DescribeTopicPartitionsResponse,
        )


def test_describe_topic_partitions_answers_ids_in_pages(cluster):
    cluster.admin.create_topic("ids-page-a", 2, 1)
    cluster.admin.create_topic("ids-page-b", 2, 1)
    names = ["ids-page-b", "ids-missing", "ids-page-a"]
    first = _describe_partitions(cluster, names, 3)
    # Name order; three partitions, then a cursor at the fourth.
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in first.topics] == [
        ("ids-missing", []),
        ("ids-page-a", [0, 1]),
        ("ids-page-b", [0]),
    ]
    assert first.topics[0].error_code == kafka_errors.UnknownTopicOrPartitionError.errno
    a = first.topics[1]
    assert (a.error_code, from_wire(a.topic_id)) == (0, _registry_id(cluster, "ids-page-a"))
    assert a.topic_authorized_operations  # Kafka always answers them here
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("ids-page-b", 1)
    cursor = DescribeTopicPartitionsRequest.Cursor(topic_name="ids-page-b", partition_index=1)
    rest = _describe_partitions(cluster, names, 3, cursor)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in rest.topics] == [
        ("ids-page-b", [1])
    ]
    assert rest.next_cursor is None
    assert from_wire(rest.topics[0].topic_id) == _registry_id(cluster, "ids-page-b")
    # The cursor's topic must be among those named (Kafka: INVALID_REQUEST).
    refused = _describe_partitions(cluster, ["ids-page-a"], 3, cursor)
    assert {t.error_code for t in refused.topics} == {kafka_errors.InvalidRequestError.errno}


def test_a_late_delete_of_an_older_topic_leaves_the_new_one_of_that_name(cluster):
    """A DeletePartition naming another topic id than the partition's (a delete of a topic
    made again since, arriving late) deletes nothing; one naming its own id deletes it."""
    cluster.admin.create_topic("ids-late-delete", 1, 1)
    assert wait_until(lambda: _served(cluster, "ids-late-delete"))
    node = cluster.nodes[1]
    topic_id = _registry_id(cluster, "ids-late-delete")
    request = storage_pb2.DeletePartitionRequest(
        topic="ids-late-delete",
        partition=0,
        cluster_id=cluster.gateway.registry.cluster_id,
        topic_id=random_uuid(),
    )
    with grpc.insecure_channel(node.address) as channel:
        stub = storage_pb2_grpc.StorageNodeStub(channel)
        stub.DeletePartition(request, timeout=RESULT_TIMEOUT_S)
        assert node.logs.topic_id("ids-late-delete", 0) == topic_id
        request.topic_id = topic_id
        stub.DeletePartition(request, timeout=RESULT_TIMEOUT_S)
    assert ("ids-late-delete", 0) not in node.logs.logs()
