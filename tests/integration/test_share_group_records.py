"""Share groups' membership records in __consumer_offsets, in Kafka 4.3.1's formats
(share/share_group_records.py): what a real Kafka 4.3.1 broker writes for a share group
replays with seglog's reader into the epochs and assignments the broker answered, and what
a gateway writes is decoded by Kafka's own reader (kafka-dump-log --offsets-decoder, its
GroupCoordinatorRecordSerde), every share record type among them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import confluent_kafka.admin
import pytest
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from devtools import apache_kafka
from seglog.records.batch import RecordBatch
from services.gateway.groups.offsets_formats import partition_for_group
from services.gateway.kafka.share_messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from services.gateway.kafka.topic_ids import from_wire
from services.gateway.share import share_group_records as records
from services.gateway.share.share_group_log import ShareGroupLog
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

TOPIC, GROUP = "queue", "sg-records"
KAFKA_OFFSETS_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions default


@pytest.fixture(scope="module", autouse=True)
def kafka_jars() -> None:
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT


def find_coordinator(wire: KafkaWire, group: str) -> object:
    request = FindCoordinatorRequest[3](key=group, key_type=0)
    return wire.request(request, 3, FindCoordinatorResponse)


def heartbeat(wire: KafkaWire, member: str, epoch: int, topics: list[str] | None) -> object:
    request = ShareGroupHeartbeatRequest[1](
        group_id=GROUP,
        member_id=member,
        member_epoch=epoch,
        rack_id=None,
        subscribed_topic_names=topics,
    )
    return wire.request(request, 1, ShareGroupHeartbeatResponse)


def join(wire: KafkaWire, member: str) -> object:
    """A member's joining heartbeat, again while the coordinator is still loading (Kafka
    answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS until its shard is up)."""
    answers = []

    def joined() -> bool:
        answers.append(heartbeat(wire, member, 0, [TOPIC]))
        assert answers[-1].error_code in (0, 14, 15, 16), answers[-1]
        return answers[-1].error_code == 0

    assert wait_until(joined, 60), answers[-1]
    return answers[-1]


def describe(wire: KafkaWire) -> object:
    request = ShareGroupDescribeRequest[1](group_ids=[GROUP], include_authorized_operations=False)
    (group,) = wire.request(request, 1, ShareGroupDescribeResponse).groups
    assert group.error_code == 0, group
    return group


def settle(wire: KafkaWire, members: dict[str, int]) -> dict[str, object]:
    """Heartbeat every member (name -> epoch, updated) until the group's epochs stop moving:
    the last answer of each."""
    answers: dict[str, object] = {}

    def stable() -> bool:
        before = dict(members)
        for member, epoch in members.items():
            answer = heartbeat(wire, member, epoch, None)
            assert answer.error_code == 0, answer
            members[member] = answer.member_epoch
            answers[member] = answer
        return before == members

    assert wait_until(stable, 60), members
    return answers


def described_assignments(group: object) -> dict[str, dict[str, tuple[int, ...]]]:
    """member -> topic id (the registry's form) -> partitions, as ShareGroupDescribe says."""
    return {
        m.member_id: {
            from_wire(t.topic_id): tuple(sorted(t.partitions))
            for t in m.assignment.topic_partitions
        }
        for m in group.members
    }


def stored_records(segment_dir: Path, group: str) -> dict[bytes, bytes]:
    """The newest value of every share-group record of `group` in the partition's segments
    (a tombstone removes its key), as a coordinator loading the partition would see them."""
    held: dict[bytes, bytes] = {}
    for segment in sorted(segment_dir.glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + 61 <= len(data):
            batch = RecordBatch(data, position)
            position += batch.size_in_bytes
            if batch.header.attributes & 0x20:  # a control batch
                continue
            for record in batch.records():
                key = bytes(record.key)
                if records.record_type(key) not in records.SHARE_GROUP_RECORD_TYPES:
                    continue
                if not key[4:].startswith(group.encode()):
                    continue
                if record.value is None:
                    held.pop(key, None)
                else:
                    held[key] = bytes(record.value)
    return held


@pytest.mark.long  # a whole Kafka broker (about 70 s); make test keeps the dump-log check below
def test_kafkas_share_group_records_replay_with_our_reader(tmp_path):
    brokers = apache_kafka.KafkaBrokers(tmp_path / "kafka")
    brokers.start()
    try:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": brokers.bootstrap})
        admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, 3, 1)])[TOPIC].result(60)
        with KafkaWire(brokers.bootstrap) as wire:
            # Kafka makes __consumer_offsets on the group's first FindCoordinator.
            assert wait_until(lambda: find_coordinator(wire, GROUP).error_code == 0, 60)
            joined: dict[str, int] = {}
            for member in ("member-a", "member-b"):
                joined[member] = join(wire, member).member_epoch
                settle(wire, joined)
            group = describe(wire)
            topic_ids = {
                from_wire(t.topic_id): TOPIC
                for m in group.members
                for t in m.assignment.topic_partitions
            }
        directory = (
            tmp_path
            / "kafka"
            / "broker-1"
            / (f"__consumer_offsets-{partition_for_group(GROUP, KAFKA_OFFSETS_PARTITIONS)}")
        )
        stored: dict[bytes, bytes] = {}

        def initialized() -> bool:
            # Kafka initializes the share partitions' state after the assignment, then
            # writes them as InitializedTopics (type 15).
            stored.clear()
            stored.update(stored_records(directory, GROUP))
            state = [
                records.decode_value(k, v)
                for k, v in stored.items()
                if records.record_type(k) == records.STATE_PARTITION_METADATA
            ]
            return bool(state and state[0].initialized_topics)

        assert wait_until(initialized, 60), stored
        kinds = {records.record_type(k) for k in stored}
        assert {10, 11, 12, 13, 14} <= kinds, kinds
    finally:
        brokers.stop()
    # Every record decodes with our formats; replayed, the group is the one Kafka described.
    for key, value in stored.items():
        records.decode_key(key)
        records.decode_value(key, value)
    names = {v: k for k, v in topic_ids.items()}
    registry = SimpleNamespace(
        image=SimpleNamespace(
            topic_name_of=lambda topic_id: topic_ids.get(topic_id, ""),
            topic_id_of=lambda name: names.get(name, ""),
        )
    )
    replayed = ShareGroupLog(registry, lambda g: stored, lambda g, r: None).load(GROUP, 30, 0)
    assert replayed is not None
    assert (replayed.epoch, replayed.assignment_epoch) == (
        group.group_epoch,
        group.assignment_epoch,
    )
    assert {m.member_id: m.epoch for m in replayed.members.values()} == {
        m.member_id: m.member_epoch for m in group.members
    }
    kafkas = {
        member: {TOPIC: parts[next(iter(parts))]} if parts else {}
        for member, parts in described_assignments(group).items()
    }
    assert {m.member_id: m.assignment for m in replayed.members.values()} == kafkas
    assert {m.subscribed for m in replayed.members.values()} == {(TOPIC,)}
    assert sorted(replayed.state_partitions) == [(TOPIC, p) for p in range(3)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("share-records"), nodes=1)
    yield c
    c.close()


def test_our_share_group_records_decode_with_kafkas_dump_log(cluster):
    cluster.admin.create_topic(TOPIC, 3, 1)
    with KafkaWire(cluster.kafka_address) as wire:
        assert find_coordinator(wire, GROUP).error_code == 0
        joined: dict[str, int] = {}
        for member in ("member-a", "member-b", "member-c"):
            joined[member] = join(wire, member).member_epoch
            settle(wire, joined)  # each member at the group's epoch before the next joins
        settle(wire, joined)
        left = heartbeat(wire, "member-c", -1, None)  # its records are tombstoned
        assert left.error_code == 0, left
        del joined["member-c"]
        settle(wire, joined)
        group = describe(wire)
    partition = cluster.gateway.offsets.partition_for(GROUP)
    segments = sorted(cluster.root.glob(f"node-*/__consumer_offsets-{partition}/*.log"))
    done = apache_kafka.run_tool(
        "org.apache.kafka.tools.DumpLogSegments",
        "--files", str(segments[0]), "--offsets-decoder", "--print-data-log",
    )  # fmt: skip
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    kinds: set[str] = set()
    deleted: set[str] = set()
    payloads: dict[str, dict] = {}
    for line in out.splitlines():
        if f'"groupId":"{GROUP}"' not in line or " key: " not in line:
            continue
        key = json.loads(line.split(" key: ", 1)[1].split(" payload: ", 1)[0])
        payload = line.split(" payload: ", 1)[1]
        kinds.add(key["type"])
        if payload.startswith("<DELETE>"):
            deleted.add(key["type"])
        else:
            assert payload.startswith("{"), line
            payloads[key["type"]] = json.loads(payload)["data"]
    assert {"10", "11", "12", "13", "14", "15"} <= kinds, out[-3000:]
    assert {"10", "13", "14"} <= deleted, out[-3000:]
    # The newest group epoch Kafka reads is the one the gateway answers.
    assert payloads["11"]["epoch"] == group.group_epoch
    assert payloads["12"]["assignmentEpoch"] == group.assignment_epoch
    assert payloads["10"]["subscribedTopicNames"] == [TOPIC]
    initialized = payloads["15"]["initializedTopics"]
    assert [(t["topicName"], sorted(t["partitions"])) for t in initialized] == [(TOPIC, [0, 1, 2])]
