"""Apache Kafka's own command-line tools (4.3.1, run as the Java mains their scripts start, from
the jars `make kafka` installs) and kcat (Debian's package, librdkafka) against the gateway's
Kafka listener, unmodified: kafka-topics creates, lists, describes, alters and deletes topics,
kafka-console-producer writes lines the gRPC consumer reads back, kafka-console-consumer reads
what the gRPC producer wrote (assigned, and in a group), kafka-consumer-groups describes that
group's committed offsets and lag and resets them; kcat -L/-P/-C/-G likewise.

One cluster for the module: every Java tool costs a JVM start (seconds), not the cluster."""

from __future__ import annotations

import json

import pytest

from devtools import apache_kafka
from devtools.apache_kafka import (
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_GROUPS_TOOL,
    GET_OFFSETS_TOOL,
    TOPICS_TOOL,
    run_tool,
)
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from tests.cluster import LocalCluster, drain
from tests.rdkafka import KCAT, kcat
from tests.waiting import wait_until

TIMEOUT_S = 30
# JVMs start in seconds: a broker per module, a JVM per tool run.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def tools_installed() -> None:
    """What these tests run is installed by `make kafka` (which `make test` runs first): a
    missing tool fails them, never skips them into green."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    assert KCAT is not None, "kcat is missing: make kafka installs Debian's kcat package"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("kafka-tools"), nodes=3)
    yield c
    c.close()


class ToolOutput(str):
    """A tool's stdout, carrying its stderr (`.errors`) for the assertions' messages: a
    console consumer that gives up still exits 0, its reason only in its log."""

    errors: str


def tool(cluster, main_class, *args, stdin=None):
    """A Kafka tool against the cluster's Kafka listener; its stdout, asserting it exited 0."""
    done = run_tool(main_class, "--bootstrap-server", cluster.kafka_address, *args, stdin=stdin)
    assert done.returncode == 0, (done.stdout.decode()[-2000:], done.stderr.decode()[-4000:])
    out = ToolOutput(done.stdout.decode())
    out.errors = done.stderr.decode()[-4000:]
    return out


def produce_over_grpc(cluster, topic, count, partitions=1):
    with Producer(cluster.address, linger_ms=5) as producer:
        futures = [
            producer.send(topic, b"value-%d" % i, key=b"key-%d" % i, partition=i % partitions)
            for i in range(count)
        ]
        for future in futures:
            future.get(timeout=TIMEOUT_S)


def read_over_grpc(cluster, topic, partitions, count):
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        return drain(consumer, count, timeout_s=TIMEOUT_S)


def test_kafka_topics_creates_lists_and_describes_a_topic(cluster):
    tool(
        cluster,
        TOPICS_TOOL,
        "--create",
        "--topic",
        "made-by-tool",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    )
    assert "made-by-tool" in tool(cluster, TOPICS_TOOL, "--list").split()
    described = tool(cluster, TOPICS_TOOL, "--describe", "--topic", "made-by-tool")
    assert "PartitionCount: 3" in described, described.errors
    assert "ReplicationFactor: 3" in described
    # The topic is seglog's like any other: the gRPC admin sees it as created.
    assert len(cluster.admin.describe_topic("made-by-tool").partitions) == 3


def test_kafka_topics_adds_partitions_and_deletes_a_topic(cluster):
    cluster.admin.create_topic("altered-by-tool", 1, 3)
    tool(cluster, TOPICS_TOOL, "--alter", "--topic", "altered-by-tool", "--partitions", "4")
    assert len(cluster.admin.describe_topic("altered-by-tool").partitions) == 4
    tool(cluster, TOPICS_TOOL, "--delete", "--topic", "altered-by-tool")
    assert wait_until(lambda: "altered-by-tool" not in cluster.admin.list_topics())


def test_kafka_topics_describes_a_topic_created_over_grpc(cluster):
    cluster.admin.create_topic("made-over-grpc", 2, 3)
    described = tool(cluster, TOPICS_TOOL, "--describe", "--topic", "made-over-grpc")
    assert "PartitionCount: 2" in described, described.errors
    lines = [line for line in described.splitlines() if "Partition: " in line]
    assert len(lines) == 2
    for line in lines:
        # A leader is always named (a gateway): never -1 or "none" for a live partition.
        assert "Leader: -1" not in line and "Leader: none" not in line
    # The topic's id (KIP-516) as Kafka prints it, and the topic found by it.
    topic_id = cluster.gateway.registry.topic("made-over-grpc").topic_id
    assert f"TopicId: {topic_id}" in described, described
    by_id = tool(cluster, TOPICS_TOOL, "--describe", "--topic-id", topic_id)
    assert "Topic: made-over-grpc" in by_id and "PartitionCount: 2" in by_id, by_id.errors


def test_kafka_get_offsets_answers_each_special_time_as_kafka(cluster):
    """kafka-get-offsets --time -1..-5 (ListOffsets v7-v9 for -3..-5): the record with the
    largest timestamp is not the last one here, so -3 must find it, not the log end."""
    cluster.admin.create_topic("offsets-by-time", 1, 3)
    timestamps = [1_000, 5_000, 3_000, 2_000]  # the largest is offset 1
    with Producer(cluster.address, linger_ms=0) as producer:
        for i, timestamp_ms in enumerate(timestamps):
            producer.send(
                "offsets-by-time", b"v%d" % i, partition=0, timestamp_ms=timestamp_ms
            ).get(timeout=TIMEOUT_S)

    def offsets(time: str) -> str:
        return tool(cluster, GET_OFFSETS_TOOL, "--topic", "offsets-by-time", "--time", time)

    assert offsets("-1").split() == ["offsets-by-time:0:4"]
    assert offsets("-2").split() == ["offsets-by-time:0:0"]
    assert offsets("-3").split() == ["offsets-by-time:0:1"]
    # Without tiered storage: the local log start is the log start, and nothing is tiered:
    # Kafka's broker answers offset -1 with no error, which the tool leaves out of its
    # output (GetOffsetShell skips UNKNOWN_OFFSET) — an error would be a "Skip" line.
    assert offsets("-4").split() == ["offsets-by-time:0:0"]
    tiered = offsets("-5")
    assert tiered.split() == [] and "Skip" not in tiered.errors, tiered.errors
    assert offsets("2500").split() == ["offsets-by-time:0:1"]


def test_console_producer_lines_are_read_by_the_grpc_consumer(cluster):
    cluster.admin.create_topic("console-in", 1, 3)
    lines = "".join(f"key-{i}:line {i}\n" for i in range(50)).encode()
    tool(
        cluster,
        CONSOLE_PRODUCER,
        "--topic",
        "console-in",
        "--reader-property",
        "parse.key=true",
        "--reader-property",
        "key.separator=:",
        stdin=lines,
    )
    records = read_over_grpc(cluster, "console-in", 1, 50)
    assert [(r.offset, r.key, r.value) for r in records] == [
        (i, b"key-%d" % i, b"line %d" % i) for i in range(50)
    ]


def test_console_consumer_reads_an_assigned_partition_from_the_start(cluster):
    cluster.admin.create_topic("console-out", 2, 3)
    produce_over_grpc(cluster, "console-out", 40, partitions=2)
    out = tool(
        cluster,
        CONSOLE_CONSUMER,
        "--topic",
        "console-out",
        "--partition",
        "1",
        "--offset",
        "earliest",
        "--max-messages",
        "20",
        "--timeout-ms",
        str(TIMEOUT_S * 1000),
        "--formatter-property",
        "print.key=true",
        "--formatter-property",
        "key.separator=:",
    )
    assert out.splitlines() == [f"key-{i}:value-{i}" for i in range(1, 40, 2)], out.errors


def test_console_consumer_in_a_group_then_kafka_consumer_groups_describes_it(cluster):
    cluster.admin.create_topic("grouped", 1, 3)
    produce_over_grpc(cluster, "grouped", 30)
    out = tool(
        cluster,
        CONSOLE_CONSUMER,
        "--topic",
        "grouped",
        "--group",
        "tool-group",
        "--from-beginning",
        "--max-messages",
        "30",
        "--timeout-ms",
        str(TIMEOUT_S * 1000),
    )
    assert out.splitlines() == [f"value-{i}" for i in range(30)], out.errors
    listed = tool(cluster, CONSUMER_GROUPS_TOOL, "--list")
    assert "tool-group" in listed.split(), listed.errors
    described = tool(cluster, CONSUMER_GROUPS_TOOL, "--describe", "--group", "tool-group")
    rows = [line.split() for line in described.splitlines() if line.startswith("tool-group")]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...: all 30 committed, no lag.
    assert [row[1:6] for row in rows] == [["grouped", "0", "30", "30", "0"]], described
    # The group is empty now: its offsets can be moved back, and the gRPC admin sees it.
    tool(
        cluster,
        CONSUMER_GROUPS_TOOL,
        "--reset-offsets",
        "--group",
        "tool-group",
        "--topic",
        "grouped",
        "--to-offset",
        "12",
        "--execute",
    )
    committed = cluster.admin.list_group_offsets("tool-group")
    assert {tp.partition: o.committed for tp, o in committed.items() if tp.topic == "grouped"} == {
        0: 12
    }


def test_java_consumer_reads_every_record_once_through_incremental_fetch_sessions(cluster):
    """Kafka's own consumer (4.3.1) fetches by topic id (v13+) in a fetch session, sending
    full requests only to open it: each of 90 one-record batches over 3 partitions is read
    once, through many small fetches (max.partition.fetch.bytes below two batches)."""
    cluster.admin.create_topic("in-sessions", 3, 1)
    with Producer(cluster.address, linger_ms=0) as producer:
        for i in range(90):  # one batch each: a fetch answers a couple per partition
            producer.send("in-sessions", b"value-%d" % i, partition=i % 3).get(timeout=TIMEOUT_S)
    sessions = cluster.gateway.kafka_listener.fetch_sessions
    created, incremental = sessions.created_with_topic_ids, sessions.incremental_requests
    out = tool(
        cluster,
        CONSOLE_CONSUMER,
        "--topic",
        "in-sessions",
        "--group",
        "session-group",
        "--from-beginning",
        "--max-messages",
        "90",
        "--timeout-ms",
        str(TIMEOUT_S * 1000),
        "--command-property",
        "max.partition.fetch.bytes=200",
    )
    lines = out.splitlines()
    assert sorted(lines) == sorted(f"value-{i}" for i in range(90)), out.errors
    assert sessions.created_with_topic_ids > created
    assert sessions.incremental_requests - incremental >= 10, out.errors


def test_kcat_lists_metadata(cluster):
    cluster.admin.create_topic("kcat-listed", 3, 3)
    metadata = json.loads(kcat(cluster.kafka_address, "-L", "-J", "-t", "kcat-listed"))
    assert metadata["brokers"], metadata
    (topic,) = metadata["topics"]
    assert topic["topic"] == "kcat-listed"
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2]
    broker_ids = {b["id"] for b in metadata["brokers"]}
    assert all(p["leader"] in broker_ids for p in topic["partitions"])


def test_kcat_produces_and_consumes(cluster):
    cluster.admin.create_topic("kcat-data", 1, 3)
    lines = "".join(f"k{i}:v{i}\n" for i in range(25)).encode()
    kcat(cluster.kafka_address, "-P", "-t", "kcat-data", "-K:", stdin=lines)
    out = kcat(
        cluster.kafka_address, "-C", "-t", "kcat-data", "-o", "beginning", "-e", "-f", "%k=%s@%o\n"
    )
    assert out.decode().splitlines() == [f"k{i}=v{i}@{i}" for i in range(25)]
    records = read_over_grpc(cluster, "kcat-data", 1, 25)
    assert [(r.key, r.value) for r in records] == [(b"k%d" % i, b"v%d" % i) for i in range(25)]


def test_kcat_consumes_in_a_group(cluster):
    cluster.admin.create_topic("kcat-grouped", 2, 3)
    produce_over_grpc(cluster, "kcat-grouped", 20, partitions=2)
    out = kcat(
        cluster.kafka_address,
        "-G",
        "kcat-group",
        "kcat-grouped",
        "-o",
        "beginning",
        "-c",
        "20",
        "-f",
        "%s\n",
        "-X",
        "session.timeout.ms=6000",
    )
    assert sorted(out.decode().splitlines()) == sorted(f"value-{i}" for i in range(20))
