"""Share-group offsets admin as Kafka 4.3.1's kafka-share-groups uses it, against a real gateway
and node: `--describe --offsets` prints each share partition's start offset and Kafka's lag
(high watermark less the start offset less the records past it already acknowledged),
`--reset-offsets --to-earliest/--to-latest/--to-datetime --execute` moves the start offset of
an empty group (AlterShareGroupOffsets) and `--delete-offsets` drops its state
(DeleteShareGroupOffsets), each printed as on a Kafka 4.3.1 broker; a group with a member is
refused NON_EMPTY_GROUP with nothing changed, and what the group reads next starts where the
tool put it (its in-flight records and delivery counts gone, as Kafka's)."""

from __future__ import annotations

import confluent_kafka
import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from devtools import apache_kafka
from devtools.apache_kafka import run_tool
from services.gateway.kafka.share_messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from services.gateway.kafka.topic_ids import to_wire
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.multi_gateway import EtcdBackedCluster
from tests.share_wire import share_fetch_request

SHARE_GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
TOPIC, GROUP = "queue", "sg"
ACCEPT = 1
NON_EMPTY_GROUP, UNKNOWN_TOPIC_OR_PARTITION = 68, 3
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    c = LocalCluster(tmp_path_factory.mktemp("share-offsets-admin"), nodes=1)
    yield c
    c.close()


def share_groups(cluster, *args) -> list[str]:
    done = run_tool(SHARE_GROUPS_TOOL, "--bootstrap-server", cluster.kafka_address, *args)
    out = done.stdout.decode()
    assert done.returncode == 0, (out[-2000:], done.stderr.decode()[-4000:])
    return [" ".join(line.split()) for line in out.splitlines() if line.strip()]


class Member:
    def __init__(self, cluster, member_id: str) -> None:
        self.wire = KafkaWire(cluster.kafka_address)
        self.member_id = member_id
        self.topic_id = to_wire(cluster.gateway.registry.image.topic_id_of(TOPIC))
        self.session_epoch = 0

    def heartbeat(self, epoch: int):
        request = ShareGroupHeartbeatRequest[1](
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=epoch,
            rack_id=None,
            subscribed_topic_names=[TOPIC] if epoch == 0 else None,
        )
        answer = self.wire.request(request, 1, ShareGroupHeartbeatResponse)
        assert answer.error_code == 0, answer
        return answer

    def fetch(self, acks=()) -> list[tuple[int, int]]:
        """(offset, delivery count) of what it acquired, after acknowledging `acks`."""
        request = share_fetch_request(
            GROUP, self.member_id, self.session_epoch, self.topic_id, acks, 100
        )
        answer = self.wire.request(request, 1, ShareFetchResponse)
        assert answer.error_code == 0, answer
        self.session_epoch += 1
        return [
            (offset, r.delivery_count)
            for topic in answer.responses
            for p in topic.partitions
            for r in p.acquired_records
            for offset in range(r.first_offset, r.last_offset + 1)
        ]

    def close(self) -> None:
        self.wire.close()


def alter(address: str, topic: str, start_offset: int):
    request_class = AlterShareGroupOffsetsRequest[0]
    topic_class = request_class.AlterShareGroupOffsetsRequestTopic
    request = request_class(
        group_id=GROUP,
        topics=[
            topic_class(
                topic_name=topic,
                partitions=[
                    topic_class.AlterShareGroupOffsetsRequestPartition(
                        partition_index=0, start_offset=start_offset
                    )
                ],
            )
        ],
    )
    with KafkaWire(address) as wire:
        return wire.request(request, 0, AlterShareGroupOffsetsResponse)


def start_offsets(address: str) -> dict[int, int]:
    """The group's share-partition start offsets as the gateway at `address` describes them."""
    request_class = DescribeShareGroupOffsetsRequest[1]
    request = request_class(
        groups=[request_class.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=None)]
    )
    with KafkaWire(address) as wire:
        answer = wire.request(request, 1, DescribeShareGroupOffsetsResponse)
    (group,) = answer.groups
    assert group.error_code == 0, group
    return {p.partition_index: p.start_offset for t in group.topics for p in t.partitions}


def test_kafka_share_groups_describes_resets_and_deletes_share_offsets_as_on_kafka(cluster):
    cluster.admin.create_topic(TOPIC, 1, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_address})
    for i in range(5):
        producer.produce(TOPIC, value=b"%d" % i)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_address)
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.GROUP, GROUP, {"share.auto.offset.reset": "earliest"})],
        raise_on_unknown=False,
    )
    admin.close()
    member = Member(cluster, "m-1")
    try:
        member.heartbeat(0)
        assert member.fetch() == [(o, 1) for o in range(5)]
        assert member.fetch(acks=[(0, 2), (4, 4)]) == []  # 3 stays acquired
        # A member holds records: the group is not empty, and nothing changes.
        refused = alter(cluster.kafka_address, TOPIC, 0)
        assert (refused.error_code, refused.responses) == (NON_EMPTY_GROUP, [])
        member.heartbeat(-1)  # leaves: its records are released
        header = "GROUP TOPIC PARTITION START-OFFSET LAG"
        # Start 3 (0-2 acknowledged), lag 5 - 3 - 1 (4 acknowledged past the start).
        assert share_groups(cluster, "--describe", "--group", GROUP, "--offsets") == [
            header,
            f"{GROUP} {TOPIC} 0 3 1",
        ]
        reset = [*(f"--{a}" for a in ("reset-offsets", "group")), GROUP, "--topic", TOPIC]
        assert share_groups(cluster, *reset, "--to-earliest", "--execute") == [
            "GROUP TOPIC PARTITION NEW-OFFSET",
            f"{GROUP} {TOPIC} 0 0",
        ]
        assert share_groups(cluster, "--describe", "--group", GROUP, "--offsets")[1:] == [
            f"{GROUP} {TOPIC} 0 0 5"
        ]
        # Reset afresh: every record again, first deliveries (the old counts are gone).
        again = Member(cluster, "m-2")
        again.heartbeat(0)
        assert again.fetch() == [(o, 1) for o in range(5)]
        again.heartbeat(-1)
        again.close()
        to_latest = share_groups(cluster, *reset, "--to-latest", "--execute")
        assert to_latest[1:] == [f"{GROUP} {TOPIC} 0 5"]
        assert share_groups(cluster, "--describe", "--group", GROUP, "--offsets")[1:] == [
            f"{GROUP} {TOPIC} 0 5 0"
        ]
        long_ago = ("--to-datetime", "2020-01-01T00:00:00.000", "--execute")
        assert share_groups(cluster, *reset, *long_ago)[1:] == [f"{GROUP} {TOPIC} 0 0"]
        # Unknown topics: per partition, the rest of the request unharmed.
        unknown = alter(cluster.kafka_address, "no-such-topic", 0)
        assert unknown.error_code == 0
        assert [p.error_code for t in unknown.responses for p in t.partitions] == [
            UNKNOWN_TOPIC_OR_PARTITION
        ]
        assert share_groups(cluster, "--delete-offsets", "--group", GROUP, "--topic", TOPIC) == [
            "TOPIC STATUS",
            f"{TOPIC} Successful",
        ]
        assert share_groups(cluster, "--describe", "--group", GROUP, "--offsets") == [
            f"Share group '{GROUP}' has no offset information."
        ]
        # No state: started again by share.auto.offset.reset (earliest).
        last = Member(cluster, "m-3")
        last.heartbeat(0)
        assert last.fetch() == [(o, 1) for o in range(5)]
        last.close()
    finally:
        member.close()


def test_offsets_reset_through_either_gateway_reach_the_partitions_holder(tmp_path):
    """With two gateways on etcd, one holds the share partition: a reset sent to the other is
    forwarded to it (ResetStart), and both describe the new start offset."""
    cluster = EtcdBackedCluster(
        tmp_path,
        gateways=2,
        nodes=2,  # the nodes' min.insync.replicas is 2
        gateway_args=("--share-coordinator-state-topic-num-partitions", "1"),
    )
    try:
        cluster.admin(0).create_topic(TOPIC, 1, 2)
        for index, start in ((0, 2), (1, 4), (0, 1)):
            answer = alter(cluster.kafka_addresses[index], TOPIC, start)
            assert answer.error_code == 0, answer
            assert [p.error_code for t in answer.responses for p in t.partitions] == [0]
            for address in cluster.kafka_addresses:
                assert start_offsets(address) == {0: start}
    finally:
        cluster.close()
