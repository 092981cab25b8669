"""Kafka's topic configs through Kafka's own clients and tools: a `compression.type=zstd`
topic written by producers that do not compress (librdkafka) or compress otherwise
(kafka-python, gzip) stores zstd batches, read back with their offsets and contents; Kafka's
kafka-configs sets, deletes and describes every topic config (`--describe --all` listing
Kafka 4.3's whole topic list); an AdminClient SUBTRACT may leave cleanup.policy empty."""

from __future__ import annotations

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaProducer
from kafka.record.default_records import DefaultRecordBatch

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from seglog.records.batch import read_header
from tests.cluster import LocalCluster

TIMEOUT_S = 30
ZSTD = 4  # attributes bits 0-2
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
# `kafka-configs --describe --all` on a Kafka 4.3.1 broker lists these for a topic.
KAFKA_TOPIC_CONFIGS = [
    "cleanup.policy",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("topic-configs"), nodes=1)
    yield c
    c.close()


def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.kafka_address})


def stored_batches(cluster, topic):
    """(codec, offsets, values) of each batch as the leader stored it, read by kafka-python's
    codec (an implementation independent of seglog's)."""
    log = cluster.nodes[1].replicas.partition(topic, 0).log
    data = bytes(log.read(0, 1 << 24))
    out, pos = [], 0
    while pos < len(data):
        size = read_header(data, pos).size_in_bytes
        batch = DefaultRecordBatch(bytearray(data[pos : pos + size]))
        assert batch.validate_crc()
        records = list(batch)
        out.append(
            (batch.compression_type, [r.offset for r in records], [r.value for r in records])
        )
        pos += size
    return out


def test_a_zstd_topic_stores_zstd_batches_whatever_the_producer_sent(cluster):
    client = admin(cluster)  # held: a collected client cancels its futures
    (future,) = client.create_topics(
        [NewTopic("zstd-topic", 1, 1, config={"compression.type": "zstd"})]
    ).values()
    future.result(timeout=TIMEOUT_S)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "compression.type": "none", "linger.ms": 50}
    )
    for i in range(20):
        producer.produce("zstd-topic", b"plain-%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    gzipped = KafkaProducer(bootstrap_servers=cluster.kafka_address, compression_type="gzip")
    try:
        for i in range(5):
            gzipped.send("zstd-topic", b"gzip-%d" % i, partition=0)
        gzipped.flush(TIMEOUT_S)
    finally:
        gzipped.close()
    batches = stored_batches(cluster, "zstd-topic")
    assert {codec for codec, _, _ in batches} == {ZSTD}
    offsets = [o for _, batch_offsets, _ in batches for o in batch_offsets]
    values = [v for _, _, batch_values in batches for v in batch_values]
    assert offsets == list(range(25))
    assert values == [b"plain-%d" % i for i in range(20)] + [b"gzip-%d" % i for i in range(5)]
    # And over Kafka's Fetch, to a consumer: the same offsets and values.
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_address, "group.id": "zstd-reader"}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition("zstd-topic", 0, 0)])
        read = []
        for _ in range(100):
            if len(read) == 25:
                break
            for message in consumer.consume(25 - len(read), timeout=1.0):
                assert message.error() is None, message.error()
                read.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert read == list(zip(offsets, values, strict=True))


def configs_tool(cluster, *args):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    done = run_tool(CONFIG_COMMAND, "--bootstrap-server", cluster.kafka_address, *args)
    assert done.returncode == 0, (done.stdout.decode()[-2000:], done.stderr.decode()[-4000:])
    return done.stdout.decode()


@pytest.mark.slow
def test_kafka_configs_alters_deletes_and_describes_every_topic_config(cluster):
    cluster.admin.create_topic("configured", 1, 1)
    topic = ["--entity-type", "topics", "--entity-name", "configured"]
    configs_tool(
        cluster,
        "--alter",
        *topic,
        "--add-config",
        "compression.type=zstd,cleanup.policy=compact,preallocate=true,compression.zstd.level=9",
    )
    configs_tool(cluster, "--alter", *topic, "--delete-config", "cleanup.policy")
    described = configs_tool(cluster, "--describe", "--all", *topic)
    lines = [line.strip() for line in described.splitlines()[1:] if line.strip()]
    names = [line.split("=", 1)[0] for line in lines]
    assert set(KAFKA_TOPIC_CONFIGS) <= set(names), set(KAFKA_TOPIC_CONFIGS) - set(names)
    assert described.splitlines()[0] == "All configs for topic configured are:"
    by_name = dict(zip(names, lines, strict=True))
    assert by_name["compression.type"].startswith(
        "compression.type=zstd sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
    )
    assert by_name["cleanup.policy"] == (
        "cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}"
    )
    assert by_name["leader.replication.throttled.replicas"] == (
        "leader.replication.throttled.replicas= sensitive=false synonyms={}"
    )
    assert by_name["preallocate"].startswith("preallocate=true ")
    assert cluster.gateway.registry.topic("configured").configs["compression.zstd.level"] == "9"


def test_subtracting_the_last_cleanup_policy_leaves_an_empty_list(cluster):
    cluster.admin.create_topic("emptied", 1, 1)
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "emptied",
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            )
        ],
    )
    client = admin(cluster)  # held: a collected client cancels its futures
    (future,) = client.incremental_alter_configs([resource]).values()
    future.result(timeout=TIMEOUT_S)
    assert cluster.gateway.registry.topic("emptied").configs == {"cleanup.policy": ""}
    (described,) = client.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, "emptied")]
    ).values()
    assert described.result(timeout=TIMEOUT_S)["cleanup.policy"].value == ""
    # Kafka's validation: a codec Kafka does not know is INVALID_CONFIG, and nothing changes.
    brotli = ConfigResource(
        ConfigResource.Type.TOPIC,
        "emptied",
        incremental_configs=[
            ConfigEntry("compression.type", "brotli", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (refused,) = client.incremental_alter_configs([brotli]).values()
    with pytest.raises(confluent_kafka.KafkaException, match="compression.type") as caught:
        refused.result(timeout=TIMEOUT_S)
    assert caught.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert cluster.gateway.registry.topic("emptied").configs == {"cleanup.policy": ""}
