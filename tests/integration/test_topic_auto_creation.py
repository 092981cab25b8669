"""Topics made when a client names them (Kafka's auto.create.topics.enable), and the answers
for names that are not made: librdkafka, kafka-python and Kafka's own Java producer write to
a topic nobody created; Metadata v4+ with allow_auto_topic_creation=false makes nothing; a
principal without Create gets TOPIC_AUTHORIZATION_FAILED; an illegal name gets
INVALID_TOPIC_EXCEPTION, which makes librdkafka fail the message at once instead of keeping
it queued until its timeout; the seglog producer's first DescribeTopics makes the topic too.

One cluster for the module, with the authorizer on and allow.everyone.if.no.acl.found (every
topic without ACLs is open), and ACLs that refuse Create on the cluster and on the topics
`closed-*` (Describe and Write on those allowed): only the topic's Create decides."""

from __future__ import annotations

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka import errors as kafka_errors
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from devtools import apache_kafka
from devtools.apache_kafka import CONSOLE_PRODUCER, run_tool
from seglog.client.producer import Producer
from seglog.errors import SeglogError
from seglog.security.acls import AclBinding
from services.gateway.kafka import error_codes
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until

TIMEOUT_S = 30
PARTITIONS = 2  # the cluster's num.partitions: not the default 1, to see it applied
ANONYMOUS = "User:ANONYMOUS"
INVALID_TOPIC_EXCEPTION = kafka_errors.InvalidTopicError.errno  # 17


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("auto-create"),
        nodes=1,
        auto_create_topics_enable=True,
        num_partitions=PARTITIONS,
        authorizer=True,
        allow_everyone_if_no_acl_found=True,
    )
    c.gateway.registry.add_acls(
        [
            # The cluster: everything but Create (so only a topic's own Create can allow it).
            AclBinding(ANONYMOUS, "*", "cluster", "literal", "kafka-cluster", "All", "allow"),
            AclBinding(ANONYMOUS, "*", "cluster", "literal", "kafka-cluster", "Create", "deny"),
            AclBinding(ANONYMOUS, "*", "topic", "prefixed", "closed-", "Describe", "allow"),
            AclBinding(ANONYMOUS, "*", "topic", "prefixed", "closed-", "Write", "allow"),
            AclBinding(ANONYMOUS, "*", "topic", "prefixed", "closed-", "Create", "deny"),
        ]
    )
    yield c
    c.close()


def metadata(cluster, names, version, *, allow=True):
    with KafkaWire(cluster.kafka_address) as wire:
        request = MetadataRequest[version](
            topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=allow,
            include_topic_authorized_operations=False,
        )
        answer = wire.request(request, version, MetadataResponse)
    return {t.name: t for t in answer.topics}


def partitions_of(cluster, name):
    topic = cluster.gateway.registry.topics.get(name)
    return None if topic is None else len(topic.partitions)


def test_librdkafka_writes_to_a_topic_nobody_created(cluster):
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "message.timeout.ms": TIMEOUT_S * 1000}
    )
    reports = []
    for i in range(10):
        producer.produce(
            "auto-rdkafka", b"v%d" % i, partition=i % PARTITIONS, on_delivery=_report(reports)
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert [error for error, _ in reports] == [None] * 10
    assert partitions_of(cluster, "auto-rdkafka") == PARTITIONS
    assert sorted(offset for _, offset in reports) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def _report(reports):
    def on_delivery(error, message):
        reports.append((error, None if error else message.offset()))

    return on_delivery


def test_kafka_python_writes_to_a_topic_nobody_created(cluster):
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_address, max_block_ms=TIMEOUT_S * 1000)
    try:
        sent = producer.send("auto-kafka-python", b"hello", partition=1).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    assert (sent.partition, sent.offset) == (1, 0)
    assert partitions_of(cluster, "auto-kafka-python") == PARTITIONS


@pytest.mark.slow
def test_kafkas_java_console_producer_writes_to_a_topic_nobody_created(cluster):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    lines = b"".join(b"line %d\n" % i for i in range(5))
    done = run_tool(
        CONSOLE_PRODUCER,
        "--bootstrap-server",
        cluster.kafka_address,
        "--topic",
        "auto-java",
        stdin=lines,
    )
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    assert partitions_of(cluster, "auto-java") == PARTITIONS
    ends = cluster.client.list_offsets("auto-java", {p: -1 for p in range(PARTITIONS)})
    assert sum(end.offset for end in ends.values()) == 5


def test_metadata_v4_creates_only_when_the_request_allows_it(cluster):
    refused = metadata(cluster, ["auto-not-allowed"], 9, allow=False)["auto-not-allowed"]
    assert refused.error_code == error_codes.UNKNOWN_TOPIC_OR_PARTITION
    assert partitions_of(cluster, "auto-not-allowed") is None
    # Made now: Kafka answers LEADER_NOT_AVAILABLE for a topic it has just made (clients
    # retry), then the topic with its leaders.
    made = metadata(cluster, ["auto-allowed"], 9)["auto-allowed"]
    assert (made.error_code, made.partitions) == (error_codes.LEADER_NOT_AVAILABLE, [])
    described = metadata(cluster, ["auto-allowed"], 9)["auto-allowed"]
    assert described.error_code == 0 and len(described.partitions) == PARTITIONS
    # Before v4 the request has no flag: Kafka's broker always allows it.
    assert metadata(cluster, ["auto-v1"], 1)["auto-v1"].error_code == (
        error_codes.LEADER_NOT_AVAILABLE
    )
    assert partitions_of(cluster, "auto-v1") == PARTITIONS


def test_create_is_needed_on_the_cluster_or_the_topic(cluster):
    answer = metadata(cluster, ["closed-orders", "open-orders"], 9)
    assert answer["closed-orders"].error_code == error_codes.TOPIC_AUTHORIZATION_FAILED
    assert partitions_of(cluster, "closed-orders") is None
    assert answer["open-orders"].error_code == error_codes.LEADER_NOT_AVAILABLE
    # The same refusal over gRPC, where seglog's producer first names a topic.
    with (
        Producer(cluster.address, max_block_ms=2000) as producer,
        pytest.raises(SeglogError, match="may not Create topic 'closed-grpc'"),
    ):
        producer.send("closed-grpc", b"v").get(timeout=TIMEOUT_S)
    assert partitions_of(cluster, "closed-grpc") is None


def test_an_illegal_name_answers_invalid_topic_and_librdkafka_fails_the_message(cluster):
    for allow in (True, False):
        answer = metadata(cluster, ["bad name!"], 9, allow=allow)["bad name!"]
        assert answer.error_code == INVALID_TOPIC_EXCEPTION
    # Legal for Kafka (249 characters), too long for its partition directories' names.
    long_name = "x" * 249
    assert metadata(cluster, [long_name], 9)[long_name].error_code == INVALID_TOPIC_EXCEPTION
    # librdkafka keeps a message for a topic answered UNKNOWN_TOPIC_OR_PARTITION queued to
    # message.timeout.ms (then _MSG_TIMED_OUT); INVALID_TOPIC_EXCEPTION fails it with that.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "message.timeout.ms": 10_000}
    )
    errors = []
    producer.produce("bad name!", b"v", on_delivery=lambda error, _: errors.append(error))
    assert wait_until(lambda: producer.poll(0.1) >= 0 and errors, timeout_s=TIMEOUT_S)
    assert errors[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION, errors[0]


def test_the_seglog_producer_creates_the_topic_it_names_first(cluster):
    assert partitions_of(cluster, "auto-grpc") is None
    # Describing does not create (the CLI's `topics describe`, the consumer).
    (described,) = cluster.client.describe_topics(["auto-grpc"])
    assert described.error and partitions_of(cluster, "auto-grpc") is None
    with Producer(cluster.address, max_block_ms=TIMEOUT_S * 1000) as producer:
        sent = producer.send("auto-grpc", b"v", partition=1).get(timeout=TIMEOUT_S)
    assert (sent.partition, sent.offset) == (1, 0)
    assert partitions_of(cluster, "auto-grpc") == PARTITIONS


def test_a_cluster_with_auto_creation_off_makes_nothing(tmp_path):
    off = LocalCluster(tmp_path, nodes=1, auto_create_topics_enable=False)
    try:
        answer = metadata(off, ["never-made"], 1)["never-made"]
        assert answer.error_code == error_codes.UNKNOWN_TOPIC_OR_PARTITION
        with (
            Producer(off.address, max_block_ms=1000) as producer,
            pytest.raises(SeglogError, match="never-made"),
        ):
            producer.send("never-made", b"v").get(timeout=TIMEOUT_S)
        assert partitions_of(off, "never-made") is None
    finally:
        off.close()


def test_create_topics_without_a_count_takes_num_partitions(cluster):
    client = AdminClient({"bootstrap.servers": cluster.kafka_address})
    (future,) = client.create_topics([NewTopic("counted-by-default", -1, -1)]).values()
    future.result(timeout=TIMEOUT_S)
    assert partitions_of(cluster, "counted-by-default") == PARTITIONS
