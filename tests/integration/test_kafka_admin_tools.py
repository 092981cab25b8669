"""Kafka 4.3.1's admin tools against the gateway's Kafka listener, for what Kafka 4.3 asks
beyond topics and groups: `kafka-features describe` (ApiVersions v4's supported and
finalized features), `kafka-features upgrade` refused past this release's levels
(UpdateFeatures), `kafka-client-metrics --list` (ListConfigResources), the broker configs
`kafka-configs --entity-type brokers` describes and alters, and `kafka-transactions
describe-producers` (DescribeProducers) over an idempotent producer's writes.

One cluster for the module: a JVM per tool run is the cost, not the cluster."""

from __future__ import annotations

import re
import time

import confluent_kafka
import pytest
from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from services.gateway.kafka.brokers import broker_view
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire

FEATURE_TOOL = "org.apache.kafka.tools.FeatureCommand"
CLIENT_METRICS_TOOL = "org.apache.kafka.tools.ClientMetricsCommand"
CONFIGS_TOOL = "kafka.admin.ConfigCommand"  # what kafka-configs.sh runs
TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    c = LocalCluster(tmp_path_factory.mktemp("kafka-admin-tools"), nodes=1)
    yield c
    c.close()


def tool(cluster, main_class, *args, returncode=0):
    done = run_tool(main_class, "--bootstrap-server", cluster.kafka_address, *args)
    out, errors = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == returncode, (out[-2000:], errors[-4000:])
    return out, errors


def test_kafka_features_describe_prints_what_this_release_supports(cluster):
    out, errors = tool(cluster, FEATURE_TOOL, "describe")
    rows = {}
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        rows[fields["Feature"]] = fields
    assert set(rows) == {
        "eligible.leader.replicas.version",
        "group.version",
        "kraft.version",
        "metadata.version",
        "share.version",
        "streams.version",
        "transaction.version",
    }, out
    metadata = rows["metadata.version"]
    assert (metadata["SupportedMinVersion"], metadata["SupportedMaxVersion"]) == (
        "3.3-IV3",
        "4.3-IV0",
    )
    assert metadata["FinalizedVersionLevel"] == "4.3-IV0"
    assert rows["eligible.leader.replicas.version"]["FinalizedVersionLevel"] == "1"
    # No transactions yet (a Java client does not take that path); KIP-848 groups, as 4.x.
    assert rows["transaction.version"]["SupportedMaxVersion"] == "0"
    assert rows["group.version"]["FinalizedVersionLevel"] == "1"
    assert rows["share.version"]["FinalizedVersionLevel"] == "1"
    assert int(metadata["Epoch"]) >= 1  # the registry's metadata offset
    # A Java client finds no telemetry API and says nothing about it.
    assert "elemetry" not in errors


def test_api_versions_v3_leaves_out_features_whose_minimum_is_0(cluster):
    with KafkaWire(cluster.kafka_address) as wire:
        request = ApiVersionsRequest[3](client_software_name="t", client_software_version="1")
        answer = wire.request(request, 3, ApiVersionsResponse)
    assert [(f.name, f.min_version, f.max_version) for f in answer.supported_features] == [
        ("metadata.version", 7, 30)
    ]
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    assert finalized == {
        "eligible.leader.replicas.version": 1,
        "group.version": 1,
        "metadata.version": 30,
        "share.version": 1,  # share groups (KIP-932)
    }


def test_kafka_features_upgrade_is_refused_past_this_releases_levels(cluster):
    out, _ = tool(cluster, FEATURE_TOOL, "upgrade", "--feature", "group.version=2", returncode=1)
    assert "Could not upgrade group.version to 2" in out
    assert "group.version is 1 in this seglog release" in out


def test_kafka_client_metrics_list_has_no_subscriptions(cluster):
    out, _ = tool(cluster, CLIENT_METRICS_TOOL, "--list")
    assert out.strip() == ""
    cluster.admin.create_topic("listed-configs", 1, 1)
    with KafkaWire(cluster.kafka_address) as wire:
        request = ListConfigResourcesRequest[1](resource_types=[2, 16])
        answer = wire.request(request, 1, ListConfigResourcesResponse)
        assert answer.error_code == 0
        listed = {(r.resource_type, r.resource_name) for r in answer.config_resources}
        assert (2, "listed-configs") in listed and all(kind == 2 for kind, _ in listed)
        request = ListConfigResourcesRequest[1](resource_types=[3])
        assert wire.request(request, 1, ListConfigResourcesResponse).error_code == 42


def test_kafka_transactions_describe_producers_shows_the_leaders_producer_state(cluster):
    cluster.admin.create_topic("idempotent", 2, 1)
    before_ms = int(time.time() * 1000)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "enable.idempotence": True}
    )
    for i in range(5):
        producer.produce("idempotent", b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    out, _ = tool(
        cluster,
        TRANSACTIONS_TOOL,
        "describe-producers",
        "--topic",
        "idempotent",
        "--partition",
        "0",
    )
    header, *rows = [line.split() for line in out.strip().splitlines()]
    assert header == [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    assert len(rows) == 1, out
    producer_id, epoch, coordinator_epoch, last_sequence, last_timestamp, txn_start = rows[0]
    assert int(producer_id) >= 0 and epoch == "0"
    assert (coordinator_epoch, last_sequence, txn_start) == ("-1", "4", "None")
    assert before_ms <= int(last_timestamp) <= int(time.time() * 1000)
    with KafkaWire(cluster.kafka_address) as wire:
        request = DescribeProducersRequest[0](
            topics=[
                DescribeProducersRequest.TopicRequest(name="idempotent", partition_indexes=[1, 7]),
                DescribeProducersRequest.TopicRequest(name="no-such-topic", partition_indexes=[0]),
            ]
        )
        answer = wire.request(request, 0, DescribeProducersResponse)
    found = {
        (t.name, p.partition_index): (p.error_code, len(p.active_producers))
        for t in answer.topics
        for p in t.partitions
    }
    # An untouched partition has no producers; unknown ones are UNKNOWN_TOPIC_OR_PARTITION.
    assert found == {
        ("idempotent", 1): (0, 0),
        ("idempotent", 7): (3, 0),
        ("no-such-topic", 0): (3, 0),
    }


def test_kafka_configs_alters_and_describes_dynamic_broker_configs(cluster):
    # The broker Metadata lists (one node at the gateway's one lane: node 1, brokers.py).
    broker = str(broker_view(cluster.gateway.kafka_core).brokers[0].node_id)
    out, _ = tool(
        cluster,
        CONFIGS_TOOL,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        broker,
        "--add-config",
        "leader.replication.throttled.rate=1048576,follower.replication.throttled.rate=2097152",
    )
    assert f"Completed updating config for broker {broker}." in out
    config = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig
    with KafkaWire(cluster.kafka_address) as wire:

        def alter(name, value, operation=0):
            resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=4,
                resource_name="",
                configs=[config(name=name, config_operation=operation, value=value)],
            )
            request = IncrementalAlterConfigsRequest[1](resources=[resource], validate_only=False)
            (result,) = wire.request(request, 1, IncrementalAlterConfigsResponse).responses
            return result.error_code

        assert alter("follower.replication.throttled.rate", "500") == 0  # the default
        assert alter("num.io.threads", "3") == 40  # INVALID_CONFIG: not dynamic here
        assert alter("leader.replication.throttled.rate", "-1") == 40
        assert alter("leader.replication.throttled.rate", "1", operation=2) == 40  # APPEND
    out, _ = tool(cluster, CONFIGS_TOOL, "--describe", "--entity-type", "brokers")
    assert out.splitlines() == [
        f"Dynamic configs for broker {broker} are:",
        "  follower.replication.throttled.rate=2097152 sensitive=false synonyms="
        "{DYNAMIC_BROKER_CONFIG:follower.replication.throttled.rate=2097152}",
        "  leader.replication.throttled.rate=1048576 sensitive=false synonyms="
        "{DYNAMIC_BROKER_CONFIG:leader.replication.throttled.rate=1048576}",
        "Default configs for brokers in the cluster are:",
        "  follower.replication.throttled.rate=500 sensitive=false synonyms="
        "{DYNAMIC_DEFAULT_BROKER_CONFIG:follower.replication.throttled.rate=500}",
    ], out
    # Kept in the registry, where the throttles are read.
    assert cluster.gateway.registry.broker_configs == {
        broker: {
            "leader.replication.throttled.rate": "1048576",
            "follower.replication.throttled.rate": "2097152",
        },
        "": {"follower.replication.throttled.rate": "500"},
    }


def test_describe_producers_of_a_dead_leader_is_not_leader_or_follower(tmp_path):
    """What the Java Admin retries after looking the leader up again, never a code it fails
    on (LEADER_NOT_AVAILABLE)."""
    c = LocalCluster(tmp_path, nodes=1)
    try:
        c.admin.create_topic("orphaned", 1, 1)
        c.stop_node(1, controlled=False)
        with KafkaWire(c.kafka_address) as wire:
            request = DescribeProducersRequest[0](
                topics=[
                    DescribeProducersRequest.TopicRequest(name="orphaned", partition_indexes=[0])
                ]
            )
            answer = wire.request(request, 0, DescribeProducersResponse)
        (partition,) = answer.topics[0].partitions
        assert partition.error_code == 6, partition.error_message  # NOT_LEADER_OR_FOLLOWER
    finally:
        c.close()
