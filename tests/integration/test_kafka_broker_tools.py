"""Kafka's own broker-facing tools (4.3.1, from the jars `make kafka` installs) against a
3-node cluster, on the storage node ids that Metadata lists as brokers (kafka/brokers.py):
kafka-reassign-partitions --generate, --execute with a replication throttle (set as broker and
topic configs, applied to the moves' catch-up) and --verify (which clears the throttles);
kafka-log-dirs --describe; kafka-leader-election; kafka-broker-api-versions.

Each node is a broker at a lane of its own (the Kafka listener's port + its id), so a
per-broker request (DescribeLogDirs) names its node; a node added to the running cluster is one
as soon as it registers. One cluster for the module: every tool
is a JVM start (seconds)."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.admin import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from tests.cluster import LocalCluster, drain
from tests.kafka_wire import KafkaWire, metadata
from tests.rdkafka import kcat
from tests.waiting import wait_until

TIMEOUT_S = 30
NODES = (1, 2, 3)
REASSIGN_TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LOG_DIRS_TOOL = "org.apache.kafka.tools.LogDirsCommand"
LEADER_ELECTION_TOOL = "org.apache.kafka.tools.LeaderElectionCommand"
BROKER_API_VERSIONS_TOOL = "org.apache.kafka.tools.BrokerApiVersionsCommand"
THROTTLE_BYTES_PER_S = 10_000_000
TOPIC, BROKER = 2, 4  # Kafka's ConfigResource types
SET, DELETE = 0, 1  # IncrementalAlterConfigs' operations
DYNAMIC_TOPIC, DYNAMIC_BROKER_CONFIG = 1, 2  # Kafka's ConfigSource
# Kafka's error codes.
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST, INVALID_CONFIG = 3, 42, 40
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    c = LocalCluster(tmp_path_factory.mktemp("kafka-broker-tools"), nodes=3)
    yield c
    c.close()


def tool(cluster, main_class, *args) -> str:
    done = run_tool(main_class, "--bootstrap-server", cluster.kafka_address, *args)
    assert done.returncode == 0, (done.stdout.decode()[-2000:], done.stderr.decode()[-4000:])
    return done.stdout.decode()


def json_after(output: str, heading: str) -> dict:
    lines = output.splitlines()
    at = lines.index(heading)
    return json.loads(next(line for line in lines[at + 1 :] if line.startswith("{")))


def broker_configs(cluster, node: int) -> dict[str, str]:
    return dict(cluster.gateway.registry.broker_configs.get(str(node), {}))


def topic_configs(cluster, topic: str) -> dict[str, str]:
    return dict(cluster.gateway.registry.topic(topic).configs)


def replicas_of(cluster, topic: str) -> dict[int, list[int]]:
    return {
        i: list(p.replicas) for i, p in enumerate(cluster.gateway.registry.topic(topic).partitions)
    }


def produce(cluster, topic: str, count: int, partitions: int) -> None:
    with Producer(cluster.address, linger_ms=5) as producer:
        futures = [
            producer.send(topic, b"value-%d" % i, partition=i % partitions) for i in range(count)
        ]
        for future in futures:
            future.get(timeout=TIMEOUT_S)


def test_reassign_partitions_generates_executes_throttled_and_verifies(cluster, tmp_path):
    topic, partitions, count = "reassigned", 3, 600
    cluster.admin.create_topic(topic, partitions, 2)
    produce(cluster, topic, count, partitions)
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))

    generated = tool(
        cluster,
        REASSIGN_TOOL,
        "--generate",
        "--topics-to-move-json-file",
        str(topics_file),
        "--broker-list",
        "1,2,3",
    )
    current = json_after(generated, "Current partition replica assignment")
    assert {p["partition"]: p["replicas"] for p in current["partitions"]} == replicas_of(
        cluster, topic
    )
    proposed = json_after(generated, "Proposed partition reassignment configuration")
    assert sorted(p["partition"] for p in proposed["partitions"]) == [0, 1, 2]
    for p in proposed["partitions"]:
        assert len(p["replicas"]) == 2 and set(p["replicas"]) <= set(NODES)

    # Each partition gets the node it lacks, as its preferred leader.
    before = replicas_of(cluster, topic)
    wanted = {i: [*(set(NODES) - set(r)), r[0]] for i, r in before.items()}
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": i, "replicas": r} for i, r in wanted.items()
                ],
            }
        )
    )
    fetchers = {n: cluster.nodes[n].replicas.follower_fetchers.throttle for n in NODES}
    charged_before = {n: fetchers[n].throttled_bytes for n in NODES}
    executed = tool(
        cluster,
        REASSIGN_TOOL,
        "--execute",
        "--reassignment-json-file",
        str(plan),
        "--throttle",
        str(THROTTLE_BYTES_PER_S),
    )
    assert f"The inter-broker throttle limit was set to {THROTTLE_BYTES_PER_S} B/s" in executed
    assert (
        "Successfully started partition reassignments for reassigned-0,reassigned-1,reassigned-2"
        in executed
    )
    # The tool's throttles, as it set them: a rate on every broker of a move, and the moving
    # replicas listed on the topic (followers: the adding ones).
    rate = str(THROTTLE_BYTES_PER_S)
    for node in NODES:
        assert broker_configs(cluster, node) == {
            "leader.replication.throttled.rate": rate,
            "follower.replication.throttled.rate": rate,
        }
    followers = topic_configs(cluster, topic)["follower.replication.throttled.replicas"]
    assert set(followers.split(",")) == {f"{i}:{r[0]}" for i, r in wanted.items()}

    assert wait_until(
        lambda: (
            replicas_of(cluster, topic) == wanted
            and not cluster.admin.list_partition_reassignments(
                [TopicPartition(topic, i) for i in range(partitions)]
            )
        ),
        TIMEOUT_S,
    )
    # Each adding replica's catch-up went through the node's throttle.
    for i, r in wanted.items():
        assert fetchers[r[0]].throttled_bytes > charged_before[r[0]], (i, r)
        assert cluster.nodes[r[0]].logs.get_log(topic, i).log_end_offset == count // partitions

    verified = tool(cluster, REASSIGN_TOOL, "--verify", "--reassignment-json-file", str(plan))
    for i in range(partitions):
        assert f"Reassignment of partition {topic}-{i} is completed." in verified, verified
    assert "Clearing broker-level throttles on brokers 1,2,3" in verified
    assert f"Clearing topic-level throttles on topic {topic}" in verified
    assert all(broker_configs(cluster, n) == {} for n in NODES)
    assert not topic_configs(cluster, topic).get("follower.replication.throttled.replicas")

    # Every record is still there, read through the moved partitions' new replicas.
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        records = drain(consumer, count, timeout_s=TIMEOUT_S)
    assert sorted(r.value for r in records) == sorted(b"value-%d" % i for i in range(count))


def test_reassign_partitions_refuses_an_unknown_broker_and_changes_nothing(cluster, tmp_path):
    cluster.admin.create_topic("stays", 1, 2)
    before = replicas_of(cluster, "stays")
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "stays", "partition": 0, "replicas": [1, 9]}]}
        )
    )
    done = run_tool(
        REASSIGN_TOOL,
        "--bootstrap-server",
        cluster.kafka_address,
        "--execute",
        "--reassignment-json-file",
        str(plan),
    )
    assert done.returncode == 1
    assert "Unknown broker id 9" in done.stdout.decode() + done.stderr.decode()
    assert replicas_of(cluster, "stays") == before


def test_log_dirs_describes_each_node_with_the_partitions_it_holds(cluster):
    topic = "dirs-listed"
    cluster.admin.create_topic(topic, 3, 2)
    produce(cluster, topic, 30, 3)
    out = tool(cluster, LOG_DIRS_TOOL, "--describe", "--topic-list", topic)
    assert "Received log directory information from brokers 1,2,3" in out
    described = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    placed = replicas_of(cluster, topic)
    by_broker = {b["broker"]: b["logDirs"] for b in described["brokers"]}
    assert sorted(by_broker) == list(NODES)
    for node, (log_dir,) in by_broker.items():
        assert log_dir["logDir"] == f"node-{node}" and log_dir["error"] is None
        held = sorted(p["partition"] for p in log_dir["partitions"])
        assert held == sorted(f"{topic}-{i}" for i, r in placed.items() if node in r)
        assert all(p["size"] > 0 for p in log_dir["partitions"])


def test_leader_election_moves_leadership_to_the_preferred_node(cluster):
    topic = "elected"
    cluster.admin.create_topic(topic, 1, 3)
    leader = cluster.gateway.registry.topic(topic).partitions[0].leader
    others = [n for n in replicas_of(cluster, topic)[0] if n != leader]
    # The same replicas with another node first: the preferred leader is no longer leading.
    reordered = [others[0], leader, others[1]]
    cluster.admin.alter_partition_reassignments({TopicPartition(topic, 0): reordered})
    assert wait_until(lambda: replicas_of(cluster, topic)[0] == reordered, TIMEOUT_S)
    assert cluster.gateway.registry.topic(topic).partitions[0].leader == leader

    out = tool(
        cluster, LEADER_ELECTION_TOOL, "--election-type", "preferred", "--all-topic-partitions"
    )
    assert "Successfully completed leader election (PREFERRED) for partitions" in out, out
    assert f"{topic}-0" in out
    assert cluster.gateway.registry.topic(topic).partitions[0].leader == others[0]
    # Metadata names the preferred node, by its id, as the leader.
    assert wait_until(
        lambda: (
            metadata(cluster.kafka_address, topic).topics[0].partitions[0].leader_id == others[0]
        ),
        TIMEOUT_S,
    )


def test_broker_api_versions_lists_each_node_at_its_lane(cluster):
    out = tool(cluster, BROKER_API_VERSIONS_TOOL)
    lanes = cluster.gateway.kafka_listener.lane_addresses
    for node in NODES:
        assert f"{lanes[node]} (id: {node} rack: null isFenced: false) -> (" in out, out
    assert out.count(" -> (") == len(NODES)
    assert "Metadata(3): 0 to " in out


def alter_configs(cluster, resources, *, validate_only=False):
    """IncrementalAlterConfigs v1 on the wire: [(type, name, [(config, op, value)])] ->
    [(error code, message)] per resource."""
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest(
        resources=[
            resource(
                resource_type=kind,
                resource_name=name,
                configs=[
                    resource.AlterableConfig(name=c, config_operation=op, value=v)
                    for c, op, v in configs
                ],
            )
            for kind, name, configs in resources
        ],
        validate_only=validate_only,
    )
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, 1, IncrementalAlterConfigsResponse)
    return [(r.error_code, r.error_message) for r in answer.responses]


def described_configs(cluster, kind: int, name: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs v4 on the wire: {config: (value, source)}."""
    request = DescribeConfigsRequest[4](
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=kind, resource_name=name, configuration_keys=None
            )
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    with KafkaWire(cluster.kafka_address) as wire:
        (result,) = wire.request(request, 4, DescribeConfigsResponse).results
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.config_source) for c in result.configs}


def test_throttle_configs_are_checked_and_bad_ones_change_nothing(cluster):
    cluster.admin.create_topic("throttle-checked", 1, 2)
    rate = "follower.replication.throttled.rate"
    replicas = "follower.replication.throttled.replicas"
    answers = alter_configs(
        cluster,
        [
            (BROKER, "2", [(rate, SET, "a lot")]),  # not a number
            (BROKER, "9", [(rate, SET, "100")]),  # no such node
            (BROKER, "3", [("log.retention.ms", SET, "100")]),  # static
            (TOPIC, "throttle-checked", [(replicas, SET, "0:x")]),
            (TOPIC, "no-such-topic", [(replicas, SET, "0:1")]),
        ],
    )
    assert [code for code, _ in answers] == [
        INVALID_CONFIG,
        INVALID_REQUEST,
        INVALID_CONFIG,  # broker_configs.py: only the throttles are dynamic
        INVALID_CONFIG,
        UNKNOWN_TOPIC_OR_PARTITION,
    ], answers
    assert "[partitionId]:[brokerId]" in answers[3][1]
    # validate_only checks and keeps nothing; a good request is kept; DELETE clears.
    good = [
        (BROKER, "2", [(rate, SET, "100")]),
        (TOPIC, "throttle-checked", [(replicas, SET, "*")]),
    ]
    assert alter_configs(cluster, good, validate_only=True) == [(0, None), (0, None)]
    assert broker_configs(cluster, 2) == {}
    assert not topic_configs(cluster, "throttle-checked").get(replicas)
    assert alter_configs(cluster, good) == [(0, None), (0, None)]
    assert broker_configs(cluster, 2) == {rate: "100"}
    assert topic_configs(cluster, "throttle-checked")[replicas] == "*"
    # Described as Kafka describes them: a dynamic broker config, a topic override.
    assert described_configs(cluster, BROKER, "2")[rate] == ("100", DYNAMIC_BROKER_CONFIG)
    assert described_configs(cluster, TOPIC, "throttle-checked")[replicas] == ("*", DYNAMIC_TOPIC)
    throttles = cluster.gateway.replication_throttles
    assert throttles.rate_for("throttle-checked", 0, leader=1, adding=[2]) == 100
    assert throttles.rate_for("throttle-checked", 0, leader=1, adding=[3]) == 0  # no rate on 3
    cleared = [
        (BROKER, "2", [(rate, DELETE, None)]),
        (TOPIC, "throttle-checked", [(replicas, DELETE, None)]),
    ]
    assert alter_configs(cluster, cleared) == [(0, None), (0, None)]
    assert broker_configs(cluster, 2) == {}
    assert not topic_configs(cluster, "throttle-checked").get(replicas)


def test_kcat_and_kafka_python_read_and_write_through_the_node_brokers(cluster):
    """Old librdkafka (Debian's kcat, 2.0) keys brokers by address too: each node at a lane
    of its own is what lets it fetch from every leader."""
    topic = "through-nodes"
    cluster.admin.create_topic(topic, 3, 3)
    # Several leaders, so several brokers at their own addresses are fetched from.
    assert len({cluster.gateway.registry.route(topic, p).leader for p in range(3)}) > 1
    lines = "".join(f"k{i}:v{i}\n" for i in range(30)).encode()
    kcat(cluster.kafka_address, "-P", "-t", topic, "-K:", stdin=lines)
    out = kcat(cluster.kafka_address, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k=%s\n")
    assert sorted(out.decode().splitlines()) == sorted(f"k{i}=v{i}" for i in range(30))

    producer = KafkaProducer(bootstrap_servers=cluster.kafka_address, acks="all")
    for i in range(30):
        producer.send(topic, value=b"py-%d" % i, partition=i % 3)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_address,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    consumer.assign([KafkaTopicPartition(topic, p) for p in range(3)])
    values = [m.value for m in consumer]
    consumer.close()
    assert sorted(v for v in values if v.startswith(b"py-")) == sorted(
        b"py-%d" % i for i in range(30)
    )
    assert len(values) == 60


def test_a_node_that_dies_leaves_the_broker_list_and_moves_no_other(tmp_path):
    """Kafka lists only live brokers: a node killed is left out (its replicas offline), the
    other keeps its address; with no node live the gateway's listener is listed instead, so a
    client can still reach the cluster."""
    cluster = LocalCluster(tmp_path, nodes=2)
    try:
        cluster.admin.create_topic("outlived", 1, 2)

        def brokers():
            answer = metadata(cluster.kafka_address, "outlived")
            return {b.node_id: f"{b.host}:{b.port}" for b in answer.brokers}, answer

        assert wait_until(lambda: len(brokers()[0]) == 2, TIMEOUT_S)
        lanes = cluster.gateway.kafka_listener.lane_addresses
        assert brokers()[0] == lanes == {1: lanes[1], 2: lanes[2]}
        cluster.stop_node(1, controlled=False)
        assert wait_until(lambda: brokers()[0] == {2: lanes[2]}, TIMEOUT_S)
        (partition,) = brokers()[1].topics[0].partitions
        assert partition.offline_replicas == [1]
        cluster.stop_node(2, controlled=False)
        assert wait_until(lambda: 2 not in brokers()[0], TIMEOUT_S)
        assert list(brokers()[0].values()) == [cluster.kafka_address]  # the gateway itself
    finally:
        cluster.close()


def test_a_node_added_to_a_running_cluster_is_a_broker_the_tools_reach_and_move_replicas_onto(
    tmp_path,
):
    """No lane count: a fourth node started beside three is listed at its own lane as it
    registers, kafka-broker-api-versions and kafka-log-dirs reach it there, and
    kafka-reassign-partitions --execute moves a replica onto it."""
    grown = LocalCluster(tmp_path, nodes=3)
    try:
        grown.admin.create_topic("onto-four", 1, 3)
        produce(grown, "onto-four", 30, 1)
        grown.start_node(4)
        port = grown.gateway.kafka_listener.port
        assert wait_until(lambda: 4 in {b.node_id for b in metadata(grown.kafka_address,
                                                                       "onto-four").brokers},
                          TIMEOUT_S)  # fmt: skip
        out = tool(grown, BROKER_API_VERSIONS_TOOL)
        assert f"127.0.0.1:{port + 4} (id: 4 rack: null isFenced: false) -> (" in out, out
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [{"topic": "onto-four", "partition": 0, "replicas": [4, 1, 2]}],
                }
            )
        )
        executed = tool(grown, REASSIGN_TOOL, "--execute", "--reassignment-json-file", str(plan))
        assert "Successfully started partition reassignment for onto-four-0" in executed
        assert wait_until(lambda: replicas_of(grown, "onto-four")[0] == [4, 1, 2], TIMEOUT_S)
        out = tool(grown, LOG_DIRS_TOOL, "--describe", "--topic-list", "onto-four")
        described = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
        by_broker = {b["broker"]: b["logDirs"] for b in described["brokers"]}
        assert sorted(by_broker) == [1, 2, 3, 4]
        (log_dir,) = by_broker[4]
        assert log_dir["logDir"] == "node-4"
        assert [p["partition"] for p in log_dir["partitions"]] == ["onto-four-0"]
    finally:
        grown.close()
