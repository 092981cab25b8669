"""KIP-848 consumer groups (group.protocol=consumer) with Kafka's own clients: librdkafka
consumers in a group of 3 under member churn read every record once, in order, each
partition owned by one member at a time; the Java consumer reads and commits; a regular
expression subscription picks up a topic created later; a static member comes back to its
partitions; offsets are checked against member epochs at the wire; the group's records in
__consumer_offsets are read by Kafka's own formatter and replayed by a restarted gateway;
Kafka's kafka-consumer-groups describes the group as Kafka does."""

from __future__ import annotations

import json
import time
import uuid

import confluent_kafka
import pytest
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from devtools import apache_kafka
from services.gateway.kafka.consumer_group_apis import (
    FENCED_MEMBER_EPOCH,
    INVALID_REGULAR_EXPRESSION,
    STALE_MEMBER_EPOCH,
    UNSUPPORTED_ASSIGNOR,
    ConsumerGroupHeartbeatRequest,
)
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.kip848_clients import (
    Ledger,
    Member,
    OwnershipWatch,
    consumer,
    describe,
    heartbeat,
    new_name,
    produce,
)
from tests.waiting import wait_for

TIMEOUT_S = 60
UNSUPPORTED_VERSION = 35
UNKNOWN_MEMBER_ID = 25
GROUP_ID_NOT_FOUND = 69
INCONSISTENT_GROUP_PROTOCOL = 23


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Heartbeats every 200 ms so that reconciliation steps (one per heartbeat) take little
    # time; sessions of 6 s outlast a loaded machine's pauses.
    c = LocalCluster(
        tmp_path_factory.mktemp("kip848"),
        nodes=2,
        group_consumer_heartbeat_interval_ms=200,
        group_consumer_session_timeout_ms=6000,
    )
    yield c
    c.close()


def test_librdkafka_group_of_three_under_churn_reads_every_record_once_in_order(cluster):
    topic, group_id = new_name("churn"), new_name("g")
    partitions, per_phase = 6, 60
    cluster.admin.create_topic(topic, partitions, 2)
    ledger = Ledger()
    watch = OwnershipWatch(cluster, group_id)
    members = {n: Member(cluster, group_id, topic, n, ledger) for n in ("a", "b", "c")}
    produced = 0
    # Each phase's records are read while members join and leave between phases: a leaving
    # member's partitions are revoked and handed over, a joining one takes some from others.
    for phase, (leaving, joining) in enumerate([(None, None), ("b", "d"), ("a", "e"), ("c", None)]):
        if leaving:
            members.pop(leaving).close()
        if joining:
            members[joining] = Member(cluster, group_id, topic, joining, ledger)
        produce(cluster, topic, range(produced, produced + per_phase), partitions)
        produced += per_phase
        wait_for(lambda n=produced: ledger.count() >= n, TIMEOUT_S, f"phase {phase}: records read")
    for member in members.values():
        member.close()
    watch.close()
    assert watch.samples > 10 and not watch.double
    assert [e for m in members.values() for e in m.errors] == []
    seen = [(p, o) for p, o, _ in ledger.read]
    assert len(seen) == len(set(seen)) == produced  # every record read once
    for partition in range(partitions):
        offsets = [o for p, o, _ in ledger.read if p == partition]
        assert offsets == list(range(len(offsets)))  # in order across owners, nothing skipped
    assert len({m for _, _, m in ledger.read}) >= 4  # the churn did move partitions
    check = consumer(cluster, group_id)
    committed = check.committed(
        [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], TIMEOUT_S
    )
    check.close()
    assert sum(tp.offset for tp in committed) == produced


def test_java_consumer_with_the_consumer_protocol_reads_and_commits(cluster):
    topic, group_id = new_name("java"), new_name("jg")
    cluster.admin.create_topic(topic, 3, 2)
    produce(cluster, topic, range(30), 3)
    done = apache_kafka.run_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", cluster.kafka_address,
        "--topic", topic,
        "--group", group_id,
        "--consumer-property", "group.protocol=consumer",
        "--from-beginning", "--max-messages", "30", "--timeout-ms", "60000",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    values = [line for line in done.stdout.decode().splitlines() if line.strip().isdigit()]
    assert sorted(int(v) for v in values) == list(range(30))
    check = consumer(cluster, group_id)
    committed = check.committed(
        [confluent_kafka.TopicPartition(topic, p) for p in range(3)], TIMEOUT_S
    )
    check.close()
    assert [tp.offset for tp in committed] == [10, 10, 10]
    # The Java consumer left: its group is empty, at a later epoch than its join.
    group = describe(cluster, group_id)
    assert (group.error_code, group.group_state, group.members) == (0, "Empty", [])
    assert group.group_epoch >= 2


def test_regex_subscription_picks_up_a_topic_created_later(cluster):
    prefix = new_name("rx")
    cluster.admin.create_topic(f"{prefix}-a", 2, 2)
    group_id = new_name("rg")
    c = consumer(cluster, group_id)
    c.subscribe([f"^{prefix}-.*"])
    produce(cluster, f"{prefix}-a", range(4), 2)
    got: set[tuple[str, int]] = set()

    def read(n):
        def enough():
            message = c.poll(0.2)
            if message is not None and not message.error():
                got.add((message.topic(), int(message.value())))
            return len(got) >= n

        return enough

    try:
        wait_for(read(4), TIMEOUT_S, "the first topic's records")
        cluster.admin.create_topic(f"{prefix}-b", 2, 2)
        produce(cluster, f"{prefix}-b", range(10, 14), 2)
        wait_for(read(8), TIMEOUT_S, "the later topic's records")
        assert {t for t, _ in got} == {f"{prefix}-a", f"{prefix}-b"}
        member = describe(cluster, group_id).members[0]
        assert member.subscribed_topic_regex is not None
        assert {t.topic_name for t in member.assignment.topic_partitions} == {
            f"{prefix}-a",
            f"{prefix}-b",
        }
    finally:
        c.close()


def test_a_regex_matches_internal_topics_as_kafkas_coordinator_does(cluster):
    # Kafka 4 matches it against every topic (franz-go's Test848RegexBrokerResolves).
    cluster.gateway.offsets.ensure_topic()
    topic, group_id, member_id = new_name("rxi"), new_name("g"), str(uuid.uuid4())
    cluster.admin.create_topic(topic, 1, 2)
    regex = f"__consumer_offsets|{topic}"
    with KafkaWire(cluster.kafka_address) as wire:
        assert heartbeat(wire, group_id, member_id, 0, regex=regex).error_code == 0
    assigned = describe(cluster, group_id).members[0].assignment.topic_partitions
    assert {t.topic_name for t in assigned} == {"__consumer_offsets", topic}


def test_static_member_rejoining_keeps_its_partitions(cluster):
    topic, group_id = new_name("static"), new_name("sg")
    cluster.admin.create_topic(topic, 4, 2)

    def assignment_of(instance):
        group = describe(cluster, group_id)
        for m in group.members:
            if m.instance_id == instance and m.member_epoch == group.assignment_epoch:
                return {p for t in m.assignment.topic_partitions for p in t.partitions}
        return None

    def stable():
        group = describe(cluster, group_id)
        return group.group_state == "Stable" and len(group.members) == 2

    first = consumer(cluster, group_id, **{"group.instance.id": "one"})
    second = consumer(cluster, group_id, **{"group.instance.id": "two"})
    first.subscribe([topic])
    second.subscribe([topic])
    try:
        wait_for(lambda: (first.poll(0.1), second.poll(0.1)) and stable(), TIMEOUT_S, "stable")
        before = assignment_of("one")
        epoch = describe(cluster, group_id).group_epoch
        assert before and len(before) == 2
        first.close()  # a static member leaves for a while (epoch -2): its place is kept
        wait_for(
            lambda: any(m.member_epoch == -2 for m in describe(cluster, group_id).members),
            TIMEOUT_S,
            "the static member's temporary leave",
        )
        first = consumer(cluster, group_id, **{"group.instance.id": "one"})
        first.subscribe([topic])
        wait_for(lambda: (first.poll(0.1), second.poll(0.1)) and stable(), TIMEOUT_S, "back")
        assert assignment_of("one") == before
        assert describe(cluster, group_id).group_epoch == epoch  # no rebalance
    finally:
        first.close()
        second.close()


def test_heartbeat_and_offsets_are_checked_against_member_epochs(cluster):
    topic, group_id = new_name("epochs"), new_name("eg")
    cluster.admin.create_topic(topic, 2, 2)
    member_id = uuid.uuid4().hex
    with KafkaWire(cluster.kafka_address) as wire:
        versions = wire.request(ApiVersionsRequest[4](), 4, ApiVersionsResponse)
        keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert keys[68] == (0, 1) and keys[69] == (0, 1)
        assert keys[8][1] >= 9 and keys[9][1] >= 9 and keys[16][1] >= 5
        finalized = {f.name: f.max_version_level for f in versions.finalized_features}
        assert finalized["group.version"] == 1

        joined = heartbeat(wire, group_id, member_id, 0, topics=[topic], assignor="range")
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, member_id, 1)
        assert sorted(joined.assignment.topic_partitions[0].partitions) == [0, 1]
        assert heartbeat(wire, group_id, member_id, 5).error_code == FENCED_MEMBER_EPOCH
        assert heartbeat(wire, group_id, "stranger", 1).error_code == UNKNOWN_MEMBER_ID
        assert heartbeat(wire, new_name("none"), member_id, 1).error_code == GROUP_ID_NOT_FOUND
        bad = heartbeat(wire, new_name("x"), member_id, 0, topics=[topic], assignor="nope")
        assert bad.error_code == UNSUPPORTED_ASSIGNOR
        bad = heartbeat(wire, new_name("x"), member_id, 0, regex="(unclosed")
        assert bad.error_code == INVALID_REGULAR_EXPRESSION

        def commit(version, epoch):
            request = OffsetCommitRequest[version](
                group_id=group_id,
                generation_id_or_member_epoch=epoch,
                member_id=member_id,
                group_instance_id=None,
                topics=[
                    OffsetCommitRequest[version].OffsetCommitRequestTopic(
                        name=topic,
                        partitions=[
                            OffsetCommitRequest[
                                version
                            ].OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                partition_index=0,
                                committed_offset=7,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            )
                        ],
                    )
                ],
            )
            answer = wire.request(request, version, OffsetCommitResponse)
            return answer.topics[0].partitions[0].error_code

        assert commit(9, 0) == STALE_MEMBER_EPOCH
        assert commit(8, 1) == UNSUPPORTED_VERSION
        assert commit(9, 1) == 0
        # A classic member joins it only with a consumer-protocol subscription (these bytes
        # are none); with one, it is served inside the group (test_kafka_group_migration.py).
        join = JoinGroupRequest[5](
            group_id=group_id,
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[JoinGroupRequest[5].JoinGroupRequestProtocol(name="range", metadata=b"")],
        )
        joined_classic = wire.request(join, 5, JoinGroupResponse)
        assert joined_classic.error_code == INCONSISTENT_GROUP_PROTOCOL
        left = heartbeat(wire, group_id, member_id, -1)
        assert (left.error_code, left.member_epoch) == (0, -1)


def test_records_decode_with_kafkas_formatter_and_replay_after_a_gateway_restart(cluster):
    topic, group_id = new_name("replay"), new_name("pg")
    cluster.admin.create_topic(topic, 4, 2)
    produce(cluster, topic, range(8), 4)
    c = consumer(cluster, group_id)
    c.subscribe([topic])
    try:
        read = []

        def poll_some():
            message = c.poll(0.2)
            if message is not None and not message.error():
                read.append(message)
            return len(read) >= 8

        wait_for(poll_some, TIMEOUT_S, "records read")
        c.commit(read[-1], asynchronous=False)
        before = describe(cluster, group_id)
        member_id = before.members[0].member_id
        cluster.restart_gateway()
        after = describe(cluster, group_id)
        assert (after.group_epoch, after.assignment_epoch) == (
            before.group_epoch,
            before.assignment_epoch,
        )
        assert [(m.member_id, m.member_epoch) for m in after.members] == [
            (member_id, before.members[0].member_epoch)
        ]
        # The consumer carries on with its member id and epoch: no join again.
        produce(cluster, topic, range(8, 12), 4)
        wait_for(lambda: poll_some() and len(read) >= 12, TIMEOUT_S, "records after restart")
        assert describe(cluster, group_id).members[0].member_id == member_id
    finally:
        c.close()
    # Kafka's own reader of __consumer_offsets (kafka-dump-log --offsets-decoder: its
    # GroupCoordinatorRecordSerde) decodes every record of the group.
    partition = cluster.gateway.offsets.partition_for(group_id)
    segments = sorted(cluster.root.glob(f"node-*/__consumer_offsets-{partition}/*.log"))
    done = apache_kafka.run_tool(
        "org.apache.kafka.tools.DumpLogSegments",
        "--files", str(segments[0]), "--offsets-decoder", "--print-data-log",
    )  # fmt: skip
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    kinds = set()
    for line in out.splitlines():
        if f'"groupId":"{group_id}"' in line and " key: " in line:
            key = line.split(" key: ", 1)[1].split(" payload: ", 1)[0]
            kinds.add(json.loads(key)["type"])
            assert "payload: {" in line or "payload: <DELETE>" in line, line
    assert {"3", "5", "6", "7", "8"} <= kinds, out[-3000:]
    assert f'"subscribedTopicNames":["{topic}"]' in out


def test_kafka_consumer_groups_tool_describes_the_group(cluster):
    topic, group_id = new_name("tool"), new_name("tg")
    cluster.admin.create_topic(topic, 2, 2)
    c = consumer(cluster, group_id, **{"group.remote.assignor": "range"})
    c.subscribe([topic])
    try:
        wait_for(
            lambda: c.poll(0.1) is None and describe(cluster, group_id).group_state == "Stable",
            TIMEOUT_S,
            "a stable group",
        )
        done = apache_kafka.run_tool(
            apache_kafka.CONSUMER_GROUPS_TOOL,
            "--bootstrap-server", cluster.kafka_address,
            "--describe", "--group", group_id, "--state",
        )  # fmt: skip
        out = done.stdout.decode()
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        row = next(line for line in out.splitlines() if line.startswith(group_id)).split()
        assert row[-3:] == ["range", "Stable", "1"]
        done = apache_kafka.run_tool(
            apache_kafka.CONSUMER_GROUPS_TOOL,
            "--bootstrap-server", cluster.kafka_address,
            "--list", "--type", "consumer",
        )  # fmt: skip
        assert group_id in done.stdout.decode().split()
    finally:
        c.close()


def test_a_member_that_does_not_revoke_in_time_is_fenced_and_its_partitions_move(cluster):
    topic, group_id = new_name("fence"), new_name("fg")
    cluster.admin.create_topic(topic, 2, 2)
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    groups = cluster.gateway.consumer_groups
    with KafkaWire(cluster.kafka_address) as wire:
        first = heartbeat(wire, group_id, a, 0, topics=[topic], rebalance_timeout_ms=1000)
        topic_id = first.assignment.topic_partitions[0].topic_id
        owned = [
            ConsumerGroupHeartbeatRequest[1].TopicPartitions(topic_id=topic_id, partitions=[0, 1])
        ]
        assert heartbeat(wire, group_id, a, 1, owned=owned).error_code == 0
        second = heartbeat(wire, group_id, b, 0, topics=[topic])
        assert second.assignment.topic_partitions == []  # both still a's
        # a hears of the new target and keeps owning what it must give up.
        revoking = heartbeat(wire, group_id, a, 1, owned=owned)
        assert len(revoking.assignment.topic_partitions[0].partitions) == 1
        assert heartbeat(wire, group_id, b, second.member_epoch).assignment is None
        # Past a's rebalance timeout (1 s) the coordinator's reaper fences it.
        groups.reap(time.monotonic() + 2)
        assert heartbeat(wire, group_id, a, 1, owned=owned).error_code == UNKNOWN_MEMBER_ID
        taken = heartbeat(wire, group_id, b, second.member_epoch)
        assert taken.error_code == 0
        assert sorted(taken.assignment.topic_partitions[0].partitions) == [0, 1]
        # Past b's session (6 s) without a heartbeat, b goes too: the group is empty.
        groups.reap(time.monotonic() + 7)
    group = describe(cluster, group_id)
    assert (group.group_state, group.members) == ("Empty", [])


def test_a_classic_groups_v9_offset_fetch_naming_its_member_is_not_checked(cluster):
    """franz-go names its classic member and generation in OffsetFetch v9: Kafka checks no
    member of a classic group there (ClassicGroup.validateOffsetFetch), so the offsets come
    back; only a KIP-848 group's member is checked against its epoch."""
    topic, group_id = new_name("classic-fetch"), new_name("cg")
    cluster.admin.create_topic(topic, 1, 2)
    commit_class = OffsetCommitRequest[8]
    topic_class = commit_class.OffsetCommitRequestTopic
    commit = commit_class(
        group_id=group_id,
        generation_id_or_member_epoch=-1,  # a simple commit: no member
        member_id="",
        group_instance_id=None,
        topics=[
            topic_class(
                name=topic,
                partitions=[
                    topic_class.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=42,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                ],
            )
        ],
    )
    fetch_class = OffsetFetchRequest[9]
    fetch = fetch_class(
        groups=[
            fetch_class.OffsetFetchRequestGroup(
                group_id=group_id,
                member_id="classic-member-1",
                member_epoch=3,
                topics=[
                    fetch_class.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                        name=topic, partition_indexes=[0]
                    )
                ],
            )
        ],
        require_stable=False,
    )
    with KafkaWire(cluster.kafka_address) as wire:
        committed = wire.request(commit, 8, OffsetCommitResponse)
        assert committed.topics[0].partitions[0].error_code == 0
        (group,) = wire.request(fetch, 9, OffsetFetchResponse).groups
    assert group.error_code == 0
    assert [(p.committed_offset, p.error_code) for p in group.topics[0].partitions] == [(42, 0)]
