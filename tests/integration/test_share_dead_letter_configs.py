"""KIP-1191's configs as Kafka 4.4 places them, on a real gateway and node: a share group's
dead-letter topic and copy mode are its own group configs, set with Kafka 4.3.1's
`kafka-configs --entity-type groups` (which sends any name; the gateway validates: the
cluster's errors.deadletterqueue.topic.name.prefix, a legal topic name, a boolean), and the
topic must opt in with its topic config errors.deadletterqueue.group.enable=true before a
group's dead letters are written there.

One cluster for the module: no gateway-wide dead-letter topic, no auto-creation, a delivery
limit of 2."""

from __future__ import annotations

import time

import pytest

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from seglog.client import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from services.gateway.share import share_metrics
from tests.cluster import LocalCluster

CONFIGS_TOOL = "kafka.admin.ConfigCommand"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    c = LocalCluster(
        tmp_path_factory.mktemp("share-dlq-configs"),
        nodes=1,
        share_coordinator_state_topic_num_partitions=1,
        group_share_delivery_count_limit=2,
        share_auto_offset_reset="earliest",
    )
    yield c
    c.close()


def alter_group(cluster, group: str, configs: str, returncode: int = 0) -> str:
    done = run_tool(
        CONFIGS_TOOL, "--bootstrap-server", cluster.kafka_address, "--alter",
        "--entity-type", "groups", "--entity-name", group, "--add-config", configs,
    )  # fmt: skip
    out = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == returncode, out[-4000:]
    return out


def describe_group(cluster, group: str) -> str:
    done = run_tool(
        CONFIGS_TOOL, "--bootstrap-server", cluster.kafka_address, "--describe",
        "--entity-type", "groups", "--entity-name", group, "--all",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    return done.stdout.decode()


def reject_all(cluster, group: str, topic: str, count: int) -> None:
    """Produce `count` records to a new topic and have a share member reject each."""
    cluster.admin.create_topic(topic, 1, 1)
    with Producer(cluster.address, linger_ms=0) as producer:
        for f in [producer.send(topic, b"v%d" % i, partition=0) for i in range(count)]:
            f.result(timeout=30)
    rejected = 0
    with ShareConsumer(
        cluster.address, group_id=group, share_acknowledgement_mode="explicit"
    ) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while rejected < count and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=300):
                consumer.acknowledge(record, AcknowledgeType.REJECT)
                rejected += 1
            assert all(e is None for e in consumer.commit_sync().values())
    assert rejected == count


def letters_in(cluster, dlq: str) -> list[dict[str, str]]:
    with Consumer(cluster.address, auto_offset_reset="earliest", consumer_timeout_ms=1000) as c:
        c.assign([TopicPartition(dlq, 0)])
        out = []
        for record in c:
            headers = {k: (v or b"").decode() for k, v in record.headers}
            headers["value"] = (record.value or b"").decode()
            out.append(headers)
        return out


def test_a_groups_own_dead_letter_topic_and_copy_mode_set_with_kafka_configs(cluster):
    cluster.admin.create_topic("dlq.orders", 1, 1, {"errors.deadletterqueue.group.enable": "true"})
    out = alter_group(
        cluster,
        "g-own",
        "errors.deadletterqueue.topic.name=dlq.orders,"
        "errors.deadletterqueue.copy.record.enable=TRUE",
    )
    assert "Completed updating config for group g-own." in out
    described = describe_group(cluster, "g-own")
    assert "errors.deadletterqueue.topic.name=dlq.orders sensitive=false" in described
    assert "errors.deadletterqueue.copy.record.enable=true sensitive=false" in described
    reject_all(cluster, "g-own", "orders", 2)
    reject_all(cluster, "g-other", "orders-other", 1)  # a group without one: no letters
    letters = letters_in(cluster, "dlq.orders")
    assert [(h["__dlq.errors.group"], h["__dlq.errors.offset"], h["value"]) for h in letters] == [
        ("g-own", "0", "v0"),
        ("g-own", "1", "v1"),
    ]
    assert per_group(cluster, "written").get("g-own") == 2


def per_group(cluster, kind: str) -> dict[str, int]:
    """The seglog.share.dead_letters.<kind> counters as exported, by group."""
    observed = share_metrics.dead_letters(cluster.gateway.share, kind)
    return {o.attributes["messaging.consumer.group.name"]: o.value for o in observed}


def test_a_topic_that_has_not_opted_in_gets_no_dead_letters(cluster):
    cluster.admin.create_topic("dlq.closed", 1, 1)  # errors.deadletterqueue.group.enable=false
    alter_group(cluster, "g-closed", "errors.deadletterqueue.topic.name=dlq.closed")
    reject_all(cluster, "g-closed", "closed-src", 2)
    assert letters_in(cluster, "dlq.closed") == []
    assert per_group(cluster, "dropped").get("g-closed") == 2
    assert "g-closed" not in per_group(cluster, "written")
    # The records were archived all the same: nothing is handed out again.
    with ShareConsumer(cluster.address, group_id="g-closed") as consumer:
        consumer.subscribe(["closed-src"])
        assert consumer.poll(timeout_ms=1500) == []


def test_bad_dead_letter_configs_are_refused_and_nothing_is_stored(cluster):
    alter_group(cluster, "g-bad", "share.auto.offset.reset=earliest")
    for bad, said in [
        ("errors.deadletterqueue.topic.name=orders", "must start with the prefix 'dlq.'"),
        ("errors.deadletterqueue.topic.name=dlq.a/b", "not a legal topic name"),
        ("errors.deadletterqueue.copy.record.enable=yes", "either true or false"),
    ]:
        out = alter_group(cluster, "g-bad", f"{bad},share.auto.offset.reset=latest", 1)
        assert "InvalidConfigurationException" in out and said in out, out[-2000:]
    described = describe_group(cluster, "g-bad")
    assert "share.auto.offset.reset=earliest sensitive=false" in described
    assert "errors.deadletterqueue.topic.name= sensitive=false" in described
