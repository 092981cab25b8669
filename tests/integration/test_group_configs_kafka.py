"""Group configs (Kafka 4's GroupConfig, cluster/group_configs.py) as Kafka 4.3.1's own tool
sets and shows them: `kafka-configs --entity-type groups` alters and describes a group's
configs with the lines a Kafka 4.3.1 broker makes it print, refuses a bad value with Kafka's
message and keeps nothing of it, and the coordinators apply each group's own values (a
KIP-848 member's and a share member's heartbeat interval, a share group's lock duration, its
auto offset reset and its isolation level: read_committed never delivers aborted records); on
etcd, a second gateway sees what the first stored, and keeps it
across its restart.

One single-gateway cluster for the module (a JVM per tool run is the cost)."""

from __future__ import annotations

import confluent_kafka
import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.protocol.admin import ListConfigResourcesRequest, ListConfigResourcesResponse

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from services.gateway.kafka.share_messages import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from services.gateway.kafka.topic_ids import to_wire
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.kip848_clients import heartbeat
from tests.multi_gateway import EtcdBackedCluster
from tests.waiting import wait_until

CONFIGS_TOOL = "kafka.admin.ConfigCommand"  # what kafka-configs.sh runs
GROUP_RESOURCE = 32
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    c = LocalCluster(tmp_path_factory.mktemp("group-configs"), nodes=1)
    yield c
    c.close()


def configs_tool(cluster, *args, returncode=0):
    done = run_tool(CONFIGS_TOOL, "--bootstrap-server", cluster.kafka_address, *args)
    out, errors = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == returncode, (out[-2000:], errors[-4000:])
    return out, errors


def alter_group(cluster, group, *args, returncode=0):
    return configs_tool(
        cluster, "--alter", "--entity-type", "groups", "--entity-name", group, *args,
        returncode=returncode,
    )  # fmt: skip


def test_kafka_configs_alters_and_describes_a_groups_configs_as_on_kafka(cluster):
    out, _ = alter_group(
        cluster,
        "g1",
        "--add-config",
        "share.auto.offset.reset=earliest,consumer.session.timeout.ms=50000",
    )
    assert "Completed updating config for group g1." in out
    described = configs_tool(
        cluster, "--describe", "--entity-type", "groups", "--entity-name", "g1"
    )[0]
    # Kafka 4.3.1's broker answers the same request with these very lines.
    expected = [
        "Dynamic configs for group g1 are:",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms"
        "=45000}",
        "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "share.auto.offset.reset=earliest, DEFAULT_CONFIG:share.auto.offset.reset=latest}",
    ]
    assert described.splitlines() == expected, described
    # Without a name: every group with configs (ListConfigResources), as on Kafka.
    out, _ = configs_tool(cluster, "--describe", "--entity-type", "groups")
    assert out.splitlines() == expected, out
    out, _ = configs_tool(
        cluster, "--describe", "--entity-type", "groups", "--entity-name", "g1", "--all"
    )
    assert (
        "  share.delivery.count.limit=5 sensitive=false synonyms="
        "{DEFAULT_CONFIG:group.share.delivery.count.limit=5}"
    ) in out.splitlines(), out
    with KafkaWire(cluster.kafka_address) as wire:
        listed = wire.request(
            ListConfigResourcesRequest[1](resource_types=[GROUP_RESOURCE]),
            1,
            ListConfigResourcesResponse,
        )
    assert [r.resource_name for r in listed.config_resources] == ["g1"]
    # Bad values: Kafka's message, and nothing of the alteration kept.
    _, errors = alter_group(
        cluster,
        "g1",
        "--add-config",
        "share.isolation.level=read_committed,share.record.lock.duration.ms=5000",
        returncode=1,
    )
    assert (
        "InvalidConfigurationException: share.record.lock.duration.ms must be greater than or "
        "equal to group.share.min.record.lock.duration.ms"
    ) in errors
    _, errors = alter_group(cluster, "g1", "--add-config", "nope=1", returncode=1)
    assert "Unknown group config name: nope" in errors
    assert cluster.gateway.registry.group_configs == {
        "g1": {"share.auto.offset.reset": "earliest", "consumer.session.timeout.ms": "50000"}
    }
    out, _ = alter_group(cluster, "g1", "--delete-config", "share.auto.offset.reset")
    assert cluster.gateway.registry.group_configs == {
        "g1": {"consumer.session.timeout.ms": "50000"}
    }


def share_fetch(address: str, group: str, topic_id: str):
    request_class = ShareFetchRequest[1]
    partition = request_class.FetchTopic.FetchPartition(
        partition_index=0, acknowledgement_batches=[]
    )
    request = request_class(
        group_id=group,
        member_id="m-1",
        share_session_epoch=0,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=[request_class.FetchTopic(topic_id=topic_id, partitions=[partition])],
        forgotten_topics_data=[],
    )
    with KafkaWire(address) as wire:
        answer = wire.request(request, 1, ShareFetchResponse)
    assert answer.error_code == 0, answer
    offsets = [
        o
        for topic in answer.responses  # none: nothing acquired
        for p in topic.partitions
        for r in p.acquired_records
        for o in range(r.first_offset, r.last_offset + 1)
    ]
    return answer.acquisition_lock_timeout_ms, offsets


def test_each_group_runs_on_its_own_configs(cluster):
    topic = "per-group"
    cluster.admin.create_topic(topic, 1, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
    for i in range(5):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(30) == 0
    alter_group(
        cluster,
        "queue-early",
        "--add-config",
        "share.auto.offset.reset=earliest,share.record.lock.duration.ms=15000,"
        "share.heartbeat.interval.ms=7000",
    )
    alter_group(cluster, "kip848", "--add-config", "consumer.heartbeat.interval.ms=8000")
    topic_id = to_wire(cluster.gateway.registry.image.topic_id_of(topic))
    # The gateway's default is latest: a group without configs starts past the 5 records;
    # the group set to earliest reads them all, under its own lock duration.
    assert share_fetch(cluster.kafka_address, "queue-late", topic_id) == (30_000, [])
    assert share_fetch(cluster.kafka_address, "queue-early", topic_id) == (
        15_000,
        [0, 1, 2, 3, 4],
    )
    with KafkaWire(cluster.kafka_address) as wire:
        joined = {
            group: wire.request(
                ShareGroupHeartbeatRequest[1](
                    group_id=group,
                    member_id="member-1",
                    member_epoch=0,
                    rack_id=None,
                    subscribed_topic_names=[topic],
                ),
                1,
                ShareGroupHeartbeatResponse,
            )
            for group in ("queue-early", "queue-late")
        }
        assert {g: (a.error_code, a.heartbeat_interval_ms) for g, a in joined.items()} == {
            "queue-early": (0, 7000),
            "queue-late": (0, 5000),
        }
        kip848 = {
            group: heartbeat(wire, group, "", 0, topics=[topic]) for group in ("kip848", "other")
        }
        assert {g: (a.error_code, a.heartbeat_interval_ms) for g, a in kip848.items()} == {
            "kip848": (0, 8000),
            "other": (0, 5000),
        }


def test_a_second_gateway_on_etcd_sees_group_configs_and_keeps_them_across_restarts(tmp_path):
    cluster = EtcdBackedCluster(tmp_path, gateways=2, nodes=1)
    try:
        admins = [
            KafkaAdminClient(bootstrap_servers=address) for address in cluster.kafka_addresses
        ]
        altered = admins[0].alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.GROUP,
                    "shared",
                    configs={"share.delivery.count.limit": "3"},
                )
            ],
            raise_on_unknown=False,
        )
        assert altered == {"group": {"shared": "OK"}}
        bad = admins[0].alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.GROUP, "shared", configs={"share.delivery.count.limit": "11"}
                )
            ],
            raise_on_unknown=False,
        )
        assert bad == {
            "group": {
                "shared": "[Error 40] InvalidConfigurationError: share.delivery.count.limit must "
                "be less than or equal to group.share.max.delivery.count.limit"
            }
        }

        def seen(index: int) -> str | None:
            described = admins[index].describe_configs(
                [ConfigResource(ConfigResourceType.GROUP, "shared")], config_filter="all"
            )
            (configs,) = [c for by_name in described.values() for c in by_name.values()]
            return configs["share.delivery.count.limit"]["value"]

        assert wait_until(lambda: seen(1) == "3", 30)
        for admin in admins:
            admin.close()
        cluster.gateways[1].stop()
        cluster.gateways[1].start()
        again = KafkaAdminClient(bootstrap_servers=cluster.kafka_addresses[1])
        admins = [again, again]
        assert wait_until(lambda: seen(1) == "3", 30)
        again.close()
    finally:
        cluster.close()


def test_a_read_committed_share_group_never_gets_aborted_records(cluster):
    topic = "transactional"
    cluster.admin.create_topic(topic, 1, 1)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "transactional.id": "share-rc"}
    )
    producer.init_transactions(30)
    for commit, values in ((False, b"abc"), (True, b"de"), (False, b"f"), (True, b"g")):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=bytes([value]))
        assert producer.flush(30) == 0  # written before an abort (else it drops them unsent)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    for group, level in (("rc", "read_committed"), ("ru", "read_uncommitted")):
        alter_group(
            cluster,
            group,
            "--add-config",
            f"share.auto.offset.reset=earliest,share.isolation.level={level}",
        )
    topic_id = to_wire(cluster.gateway.registry.image.topic_id_of(topic))
    # Offsets: a b c (aborted) 3:marker d e (committed) 6:marker f (aborted) 8:marker g 10:marker
    assert share_fetch(cluster.kafka_address, "rc", topic_id)[1] == [4, 5, 9]
    assert share_fetch(cluster.kafka_address, "ru", topic_id)[1] == [0, 1, 2, 4, 5, 7, 9]
