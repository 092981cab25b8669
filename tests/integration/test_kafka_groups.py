"""Consumer groups over Kafka's protocol with Kafka's own clients: librdkafka (confluent-kafka)
and kafka-python consumers subscribe as groups of Kafka's classic protocol (the leader member
assigns), rebalance as members come and go, commit and read their offsets; a static member
restarts without a rebalance; offsets cross between the Kafka and gRPC APIs both ways;
Kafka's admin clients list, describe and delete groups and offsets; the APIs' oldest served
versions and their authorization, at the wire; a group across a gateway restart (mutual TLS
and the authorizer on, as in production)."""

from __future__ import annotations

import io
from collections import Counter

import confluent_kafka
import confluent_kafka.admin
import kafka
import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.structs import TopicPartition as KafkaTopicPartition

from seglog.cli.groups import describe_group
from seglog.cli.main import build_parser
from seglog.client.consumer import Consumer
from seglog.client.structs import OffsetAndMetadata, TopicPartition
from seglog.security.acls import AclBinding
from tests.authorizer_modes import AUTHORIZER_MODES, GROUP_GRANTS, Grant, cluster_in_mode
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.secured import librdkafka_tls
from tests.waiting import wait_until

TIMEOUT_S = 30
UNKNOWN_MEMBER_ID = kafka.errors.UnknownMemberIdError.errno
GROUP_AUTHORIZATION_FAILED = kafka.errors.GroupAuthorizationFailedError.errno
TOPIC_AUTHORIZATION_FAILED = kafka.errors.TopicAuthorizationFailedError.errno
PARTITIONS = 4


@pytest.fixture(scope="module", params=AUTHORIZER_MODES)
def cluster(request, tmp_path_factory):
    """The module's tests with the authorizer off, then on (GROUP_GRANTS to ANONYMOUS, the
    Kafka listener's principal without SASL)."""
    c = cluster_in_mode(
        tmp_path_factory.mktemp("kafka-groups"), request.param, GROUP_GRANTS, nodes=3
    )
    yield c
    c.close()


def create_topic(cluster, topic, partitions=PARTITIONS):
    cluster.admin.create_topic(topic, partitions, 3)


def produce(cluster, topic, values, partitions=PARTITIONS, **config):
    """acks=all, each value to partition value % partitions."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "acks": "all", **config}
    )
    for value in values:
        producer.produce(topic, value=str(value).encode(), partition=value % partitions)
    assert producer.flush(TIMEOUT_S) == 0


def rdkafka_consumer(cluster, group, **config):
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "heartbeat.interval.ms": 200,
            "session.timeout.ms": 10_000,
            **config,
        }
    )


class Reader:
    """Polls one librdkafka consumer, committing each record synchronously after reading
    it: a record read twice is one whose first reader's commit failed (a rebalance cut in)."""

    def __init__(self, consumer, seen: Counter, uncommitted: set[int]) -> None:
        self.consumer = consumer
        self.seen = seen
        self.uncommitted = uncommitted

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is None or message.error() is not None:
            return
        value = int(message.value())
        self.seen[value] += 1
        try:
            self.consumer.commit(message=message, asynchronous=False)
        except confluent_kafka.KafkaException:
            self.uncommitted.add(value)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(readers, predicate, timeout_s=TIMEOUT_S) -> bool:
    def step():
        for reader in readers:
            reader.poll()
        return predicate()

    return wait_until(step, timeout_s, interval_s=0)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_librdkafka_consumers_share_partitions_through_rebalances_losing_nothing(cluster, strategy):
    # Eager (range: every member gives up its partitions at each rebalance) and incremental
    # (cooperative-sticky: only moved partitions change hands, over two rebalances) alike:
    # the coordinator hands over whatever the leader member assigned.
    topic = group_id = f"shared-{strategy}"
    config = {"partition.assignment.strategy": strategy}
    create_topic(cluster, topic)
    produce(cluster, topic, range(200))
    seen: Counter[int] = Counter()
    uncommitted: set[int] = set()
    first = Reader(rdkafka_consumer(cluster, group_id, **config), seen, uncommitted)
    first.consumer.subscribe([topic])
    assert poll_until([first], lambda: first.partitions() == set(range(PARTITIONS)))
    second = Reader(rdkafka_consumer(cluster, group_id, **config), seen, uncommitted)
    second.consumer.subscribe([topic])
    try:
        # The second member's join rebalances the group: each gets a share, disjoint and
        # complete, as the leader member computed it.
        assert poll_until(
            [first, second],
            lambda: (
                first.partitions()
                and second.partitions()
                and first.partitions() | second.partitions() == set(range(PARTITIONS))
                and not first.partitions() & second.partitions()
            ),
        ), (first.partitions(), second.partitions())
        group = cluster.gateway.coordinator.snapshot(group_id)
        assert (group.kind, group.state, len(group.members)) == ("classic", "Stable", 2)
        produce(cluster, topic, range(200, 400))
        assert poll_until([first, second], lambda: len(seen) == 400), len(seen)
    finally:
        second.consumer.close()  # leaves the group: the first takes every partition back
    try:
        assert poll_until([first], lambda: first.partitions() == set(range(PARTITIONS)))
        produce(cluster, topic, range(400, 500))
        assert poll_until([first], lambda: len(seen) == 500), len(seen)
        committed = first.consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
    finally:
        first.consumer.close()
    assert set(seen) == set(range(500))
    assert {value for value, count in seen.items() if count > 1} <= uncommitted
    assert [tp.offset for tp in committed] == [125] * PARTITIONS


def test_kafka_python_consumer_group_reads_and_commits(cluster):
    topic = "kafka-python-group"
    create_topic(cluster, topic)
    produce(cluster, topic, range(100))
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=cluster.kafka_address,
        group_id="kafka-python-readers",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=200,
    )
    values: list[int] = []
    try:
        wait_until(
            lambda: (
                values.extend(
                    int(r.value) for rs in consumer.poll(timeout_ms=200).values() for r in rs
                )
                or len(values) >= 100
            ),
            TIMEOUT_S,
            interval_s=0,
        )
        assert sorted(values) == list(range(100))
        assert {tp.partition for tp in consumer.assignment()} == set(range(PARTITIONS))
        consumer.commit()
        committed = {
            p: consumer.committed(KafkaTopicPartition(topic, p)) for p in range(PARTITIONS)
        }
    finally:
        consumer.close()
    assert committed == dict.fromkeys(range(PARTITIONS), 25)
    # The same offsets through seglog's own API: one store.
    reader = Consumer(cluster.address, group_id="kafka-python-readers")
    try:
        seglog_view = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        reader.close(autocommit=False)
    assert {tp.partition: om.offset for tp, om in seglog_view.items()} == dict.fromkeys(
        range(PARTITIONS), 25
    )


def test_a_static_member_restarts_without_a_rebalance(cluster):
    topic = "static"
    create_topic(cluster, topic)
    produce(cluster, topic, range(40))
    seen: Counter[int] = Counter()
    uncommitted: set[int] = set()

    def member(instance):
        reader = Reader(
            rdkafka_consumer(cluster, "statics", **{"group.instance.id": instance}),
            seen,
            uncommitted,
        )
        reader.consumer.subscribe([topic])
        return reader

    first, second = member("static-a"), member("static-b")
    try:
        assert poll_until(
            [first, second],
            lambda: (
                first.partitions()
                and second.partitions()
                and first.partitions() | second.partitions() == set(range(PARTITIONS))
                and len(seen) == 40
            ),
        )
        before = cluster.gateway.coordinator.snapshot("statics")
        owned = first.partitions()
        first.consumer.close()  # a static member does not leave: its place is kept
        first = member("static-a")
        assert poll_until([first, second], lambda: first.partitions() == owned)
        after = cluster.gateway.coordinator.snapshot("statics")
        # Same generation, same members by instance, the old member id replaced.
        assert after.generation == before.generation
        assert after.state == "Stable"
        assert sorted(m.group_instance_id for m in after.members.values()) == [
            "static-a",
            "static-b",
        ]
        assert set(after.members) != set(before.members)
        assert second.partitions() == set(range(PARTITIONS)) - owned
    finally:
        first.consumer.close()
        second.consumer.close()


def test_offsets_cross_between_librdkafka_and_seglog_consumers(cluster):
    topic = "crossing"
    create_topic(cluster, topic)
    # librdkafka commits, seglog reads.
    committer = rdkafka_consumer(cluster, "crossers")
    committer.commit(
        offsets=[confluent_kafka.TopicPartition(topic, p, 10 + p) for p in range(PARTITIONS)],
        asynchronous=False,
    )
    committer.close()
    reader = Consumer(cluster.address, group_id="crossers")
    try:
        seen = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)])
        assert {tp.partition: om.offset for tp, om in seen.items()} == {
            p: 10 + p for p in range(PARTITIONS)
        }
        # seglog commits, librdkafka reads.
        reader.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        reader.commit({TopicPartition(topic, p): OffsetAndMetadata(20 + p, "") for p in range(2)})
    finally:
        reader.close(autocommit=False)
    checker = rdkafka_consumer(cluster, "crossers")
    try:
        read = checker.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
    finally:
        checker.close()
    assert [tp.offset for tp in read] == [20, 21, 12, 13]


def test_seglogs_cli_describes_a_kafka_groups_members_and_assignment(cluster):
    topic = "described-group"
    create_topic(cluster, topic)
    produce(cluster, topic, range(8))
    seen: Counter[int] = Counter()
    reader = Reader(rdkafka_consumer(cluster, "describers"), seen, set())
    reader.consumer.subscribe([topic])
    try:
        assert poll_until([reader], lambda: len(seen) == 8)
        out = io.StringIO()
        args = build_parser().parse_args(
            ["groups", "describe", "--bootstrap", cluster.address, "describers"]
        )
        assert describe_group(args, out) == 0
        (member_id,) = cluster.gateway.coordinator.snapshot("describers").members
    finally:
        reader.consumer.close()
    lines = out.getvalue().splitlines()
    assert "State: Stable" in lines[0] and "Strategy: range" in lines[0]
    rows = [line.split() for line in lines[2:]]
    assert [(row[0], row[1], row[2], row[5]) for row in rows] == [
        (topic, str(p), "2", member_id) for p in range(PARTITIONS)
    ]


def test_kafka_admin_clients_list_describe_and_delete_groups_and_offsets(cluster):
    topic = "administered"
    create_topic(cluster, topic)
    produce(cluster, topic, range(8))
    seen: Counter[int] = Counter()
    reader = Reader(rdkafka_consumer(cluster, "administered-readers"), seen, set())
    reader.consumer.subscribe([topic])
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_address)
    try:
        assert poll_until([reader], lambda: len(seen) == 8)
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["administered-readers"]["protocol_type"] == "consumer"
        assert listed["administered-readers"]["group_state"] == "Stable"
        described = admin.describe_groups(["administered-readers"])["administered-readers"]
        assert described["group_state"] == "Stable"
        assert described["protocol_data"] == "range"
        (member,) = described["members"]
        assignment = member["member_assignment"]["assigned_partitions"]
        assert assignment == [{"topic": topic, "partitions": list(range(PARTITIONS))}]
        # Offsets of a topic the group reads cannot be deleted; the group is not empty.
        refused = admin.delete_group_offsets(
            "administered-readers", [KafkaTopicPartition(topic, 0)]
        )
        assert refused[KafkaTopicPartition(topic, 0)] is kafka.errors.GroupSubscribedToTopicError
        refusal = admin.delete_groups(["administered-readers"])["administered-readers"]
        assert refusal == "NonEmptyGroupError"
        reader.consumer.close()
        assert wait_until(
            lambda: (
                admin.describe_groups(["administered-readers"])["administered-readers"][
                    "group_state"
                ]
                == "Empty"
            )
        )
        deleted = admin.delete_group_offsets(
            "administered-readers", [KafkaTopicPartition(topic, 0)]
        )
        assert deleted[KafkaTopicPartition(topic, 0)] is kafka.errors.NoError
        remaining = cluster.gateway.offsets.committed("administered-readers")
        assert sorted(p for _, p in remaining) == [1, 2, 3]
        assert admin.delete_groups(["administered-readers"])["administered-readers"] == "OK"
        assert cluster.gateway.offsets.committed("administered-readers") == {}
        gone = admin.describe_groups(["administered-readers"])["administered-readers"]
        assert gone["group_state"] == "Dead"
    finally:
        admin.close()


def test_confluent_admin_lists_and_describes_a_group(cluster):
    topic = "confluent-administered"
    create_topic(cluster, topic)
    produce(cluster, topic, range(4))
    seen: Counter[int] = Counter()
    reader = Reader(rdkafka_consumer(cluster, "confluent-administered"), seen, set())
    reader.consumer.subscribe([topic])
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.kafka_address})
    try:
        assert poll_until([reader], lambda: len(seen) == 4)
        listed = admin.list_consumer_groups().result(timeout=TIMEOUT_S)
        assert "confluent-administered" in {g.group_id for g in listed.valid}
        (future,) = admin.describe_consumer_groups(["confluent-administered"]).values()
        described = future.result(timeout=TIMEOUT_S)
        (member,) = described.members
        assert {tp.partition for tp in member.assignment.topic_partitions} == set(range(PARTITIONS))
        assert str(described.state).endswith("STABLE")
    finally:
        reader.consumer.close()


# -- the protocol's versions, at the wire ------------------------------------------------------


def join_request(version, member_id="", *, instance=None):
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(
        name="range",
        metadata=ConsumerProtocolSubscription(version=0, topics=["wire-group"]).encode(),
    )
    return JoinGroupRequest[version](
        group_id=f"wire-v{version}",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[protocol],
    )


def test_the_oldest_served_versions_run_a_group_end_to_end(cluster):
    create_topic(cluster, "wire-group")
    given = ConsumerProtocolAssignment(
        version=0,
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic="wire-group", partitions=[0, 1])
        ],
    ).encode()
    with KafkaWire(cluster.kafka_address) as wire:
        found = wire.request(FindCoordinatorRequest[0](key="wire-v0"), 0, FindCoordinatorResponse)
        # The lowest live node, at its lane (kafka/brokers.py).
        lowest = min(cluster.nodes)
        assert (found.error_code, found.node_id) == (0, lowest)
        lane = cluster.gateway.kafka_listener.lane_addresses[lowest]
        assert f"{found.host}:{found.port}" == lane
        # v0 needs no known member id and has no rebalance timeout.
        joined = wire.request(join_request(0), 0, JoinGroupResponse)
        assert joined.error_code == 0 and joined.leader == joined.member_id
        assert [m.member_id for m in joined.members] == [joined.member_id]
        member, generation = joined.member_id, joined.generation_id
        synced = wire.request(
            SyncGroupRequest[0](
                group_id="wire-v0",
                generation_id=generation,
                member_id=member,
                assignments=[
                    SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=given)
                ],
            ),
            0,
            SyncGroupResponse,
        )
        assert (synced.error_code, bytes(synced.assignment)) == (0, bytes(given))
        beat = HeartbeatRequest[0](group_id="wire-v0", generation_id=generation, member_id=member)
        assert wire.request(beat, 0, HeartbeatResponse).error_code == 0
        commit = OffsetCommitRequest[2](
            group_id="wire-v0",
            generation_id_or_member_epoch=generation,
            member_id=member,
            retention_time_ms=-1,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="wire-group",
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                            partition_index=1, committed_offset=7, committed_metadata="m"
                        )
                    ],
                )
            ],
        )
        (topic,) = wire.request(commit, 2, OffsetCommitResponse).topics
        assert [p.error_code for p in topic.partitions] == [0]
        fetch = OffsetFetchRequest[1](
            group_id="wire-v0",
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(
                    name="wire-group", partition_indexes=[0, 1]
                )
            ],
        )
        (topic,) = wire.request(fetch, 1, OffsetFetchResponse).topics
        assert [(p.committed_offset, p.metadata, p.error_code) for p in topic.partitions] == [
            (-1, "", 0),
            (7, "m", 0),
        ]
        leave = LeaveGroupRequest[0](group_id="wire-v0", member_id=member)
        assert wire.request(leave, 0, LeaveGroupResponse).error_code == 0
        assert wire.request(leave, 0, LeaveGroupResponse).error_code == UNKNOWN_MEMBER_ID


def test_join_v7_asks_a_new_member_to_join_again_with_its_id(cluster):
    with KafkaWire(cluster.kafka_address) as wire:
        first = wire.request(join_request(7), 7, JoinGroupResponse)
        assert first.error_code == kafka.errors.MemberIdRequiredError.errno
        assert first.member_id
        joined = wire.request(join_request(7, first.member_id), 7, JoinGroupResponse)
        assert (joined.error_code, joined.member_id) == (0, first.member_id)
        assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
        # LeaveGroup v3+: a batch, one answer per member.
        leave = LeaveGroupRequest[4](
            group_id="wire-v7",
            members=[
                LeaveGroupRequest.MemberIdentity(member_id="never-joined"),
                LeaveGroupRequest.MemberIdentity(member_id=joined.member_id),
            ],
        )
        answer = wire.request(leave, 4, LeaveGroupResponse)
        assert answer.error_code == 0
        assert [m.error_code for m in answer.members] == [UNKNOWN_MEMBER_ID, 0]


def test_a_kafka_member_cannot_join_a_group_of_seglog_consumers(cluster):
    create_topic(cluster, "mixed")
    seglog_member = Consumer(cluster.address, group_id="wire-v5", client_id="mixed-reader")
    seglog_member.subscribe(["mixed"])
    try:
        assert wait_until(
            lambda: seglog_member.poll_records(timeout_ms=100) == [] and seglog_member.assignment()
        )
        with KafkaWire(cluster.kafka_address) as wire:
            refused = wire.request(join_request(5), 5, JoinGroupResponse)
            described = wire.request(
                DescribeGroupsRequest[5](groups=["wire-v5", "no-such-group"]),
                5,
                DescribeGroupsResponse,
            )
    finally:
        seglog_member.close(autocommit=False)
    assert refused.error_code == kafka.errors.InconsistentGroupProtocolError.errno
    # Kafka's tools read a seglog group: the coordinator's assignment in the consumer
    # protocol's bytes.
    seglog_group, absent = described.groups
    assert (seglog_group.group_state, seglog_group.protocol_type) == ("Stable", "consumer")
    (member,) = seglog_group.members
    assert member.client_id == "mixed-reader"  # what kafka-consumer-groups shows as CLIENT-ID
    assignment = ConsumerProtocolAssignment.decode(member.member_assignment)
    assert [(a.topic, a.partitions) for a in assignment.assigned_partitions] == [
        ("mixed", list(range(PARTITIONS)))
    ]
    assert (absent.error_code, absent.group_state) == (0, "Dead")


# -- authorization ------------------------------------------------------------------------------


def test_group_apis_are_authorized_per_group_and_per_topic_as_kafkas(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, authorizer=True)
    try:
        anonymous = [
            AclBinding("User:ANONYMOUS", "*", "topic", "literal", "*", "Create", "allow"),
            AclBinding("User:ANONYMOUS", "*", "topic", "literal", "readable", "Read", "allow"),
            AclBinding("User:ANONYMOUS", "*", "group", "literal", "allowed", "Read", "allow"),
        ]
        cluster.gateway.registry.add_acls(anonymous)  # the server's own setup, not a client
        cluster.admin.create_topic("readable", 1, 1)
        cluster.admin.create_topic("hidden", 1, 1)

        def commit_request(group):
            return OffsetCommitRequest[5](
                group_id=group,
                generation_id_or_member_epoch=-1,  # a simple commit, outside membership
                member_id="",
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=[
                            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=3, committed_metadata=""
                            )
                        ],
                    )
                    for topic in ("readable", "hidden")
                ],
            )

        with KafkaWire(cluster.kafka_address) as wire:
            denied = wire.request(
                FindCoordinatorRequest[2](key="denied", key_type=0), 2, FindCoordinatorResponse
            )
            assert denied.error_code == GROUP_AUTHORIZATION_FAILED
            assert "__consumer_offsets" not in cluster.gateway.registry.topics  # not when refused
            found = wire.request(
                FindCoordinatorRequest[2](key="allowed", key_type=0), 2, FindCoordinatorResponse
            )
            # Kafka's broker makes the offsets topic on a group's first FindCoordinator (clients
            # such as franz-go's regex consumer wait to see it in Metadata).
            assert found.error_code == 0
            assert "__consumer_offsets" in cluster.gateway.registry.topics
            joined = wire.request(
                JoinGroupRequest[5](
                    group_id="denied",
                    session_timeout_ms=10_000,
                    rebalance_timeout_ms=10_000,
                    member_id="",
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocols=[
                        JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
                    ],
                ),
                5,
                JoinGroupResponse,
            )
            assert joined.error_code == GROUP_AUTHORIZATION_FAILED
            committed = wire.request(commit_request("allowed"), 5, OffsetCommitResponse)
            assert {t.name: t.partitions[0].error_code for t in committed.topics} == {
                "readable": 0,
                "hidden": TOPIC_AUTHORIZATION_FAILED,
            }
            refused = wire.request(commit_request("denied"), 5, OffsetCommitResponse)
            assert {t.partitions[0].error_code for t in refused.topics} == {
                GROUP_AUTHORIZATION_FAILED,
                TOPIC_AUTHORIZATION_FAILED,
            }
            fetched = wire.request(
                OffsetFetchRequest[5](group_id="allowed", topics=None), 5, OffsetFetchResponse
            )
            assert fetched.error_code == 0
            assert [(t.name, t.partitions[0].committed_offset) for t in fetched.topics] == [
                ("readable", 3)
            ]
            described = wire.request(
                DescribeGroupsRequest[5](groups=["allowed", "denied"]), 5, DescribeGroupsResponse
            )
            assert [g.error_code for g in described.groups] == [0, GROUP_AUTHORIZATION_FAILED]
            listed = wire.request(ListGroupsRequest[4](states_filter=[]), 4, ListGroupsResponse)
            assert [g.group_id for g in listed.groups] == ["allowed"]
        assert cluster.gateway.offsets.committed("denied") == {}
    finally:
        cluster.close()


# -- a coordinator restart ---------------------------------------------------------------------
# In the production configuration only (the group's behaviour across a restart does not depend
# on the authorizer; its authorizer-off paths are the shared-cluster tests' first run): mutual
# TLS on gRPC and on the Kafka listener, the authorizer on, and the tests' principal — the
# certificate `client`, no super user — granted exactly what the test does.


def secured_cluster(root, topic: str, group: str) -> LocalCluster:
    """One node, mutual TLS, the authorizer on; `User:client` may create and use `topic` and
    join and commit as `group` (the ACLs an operator would have put in place first)."""
    cluster = LocalCluster(
        root, nodes=1, tls=True, authorizer=True, kafka_listen="SSL://127.0.0.1:0"
    )
    grants = (
        Grant("topic", ("Create", "Write", "Read"), topic),
        Grant("group", ("Read",), group),
    )
    assert cluster.gateway is not None
    cluster.gateway.registry.add_acls([b for g in grants for b in g.bindings("User:client")])
    return cluster


def client_tls(cluster) -> dict[str, str]:
    """librdkafka's settings for the SSL listener with the `client` certificate."""
    return librdkafka_tls(cluster.tls_files("client"))


def test_a_librdkafka_group_continues_across_a_gateway_restart(tmp_path):
    # Membership is the gateway's memory: the member meets UNKNOWN_MEMBER_ID and joins again,
    # in the generation after the stored one, and resumes from its committed offsets.
    cluster = secured_cluster(tmp_path, "restarted", "restarted-readers")
    tls = client_tls(cluster)
    try:
        cluster.admin.create_topic("restarted", PARTITIONS, 1)
        produce(cluster, "restarted", range(100), **tls)
        seen: Counter[int] = Counter()
        uncommitted: set[int] = set()
        reader = Reader(rdkafka_consumer(cluster, "restarted-readers", **tls), seen, uncommitted)
        reader.consumer.subscribe(["restarted"])
        try:
            assert poll_until([reader], lambda: len(seen) == 100)
            before = cluster.gateway.coordinator.snapshot("restarted-readers").generation
            cluster.restart_gateway()  # same gRPC and Kafka ports, same data
            produce(cluster, "restarted", range(100, 200), **tls)
            assert poll_until([reader], lambda: len(seen) == 200), len(seen)
            after = cluster.gateway.coordinator.snapshot("restarted-readers")
        finally:
            reader.consumer.close()
        assert (after.state, after.generation) == ("Stable", before + 1)
        assert set(seen) == set(range(200))
        assert {value for value, count in seen.items() if count > 1} <= uncommitted
    finally:
        cluster.close()


def test_a_static_librdkafka_member_keeps_its_place_across_a_gateway_restart(tmp_path):
    # Kafka's coordinator loads a group with its members: a static member goes on in its
    # generation, no rebalance.
    cluster = secured_cluster(tmp_path, "kept", "kept-readers")
    tls = client_tls(cluster)
    try:
        cluster.admin.create_topic("kept", PARTITIONS, 1)
        produce(cluster, "kept", range(40), **tls)
        seen: Counter[int] = Counter()
        uncommitted: set[int] = set()
        config = {"group.instance.id": "kept-a", **tls}
        reader = Reader(rdkafka_consumer(cluster, "kept-readers", **config), seen, uncommitted)
        reader.consumer.subscribe(["kept"])
        try:
            assert poll_until([reader], lambda: len(seen) == 40)
            before = cluster.gateway.coordinator.snapshot("kept-readers")
            assert cluster.gateway.coordinator.wait_persisted(TIMEOUT_S)
            cluster.restart_gateway()
            produce(cluster, "kept", range(40, 80), **tls)
            assert poll_until([reader], lambda: len(seen) == 80), len(seen)
            after = cluster.gateway.coordinator.snapshot("kept-readers")
        finally:
            reader.consumer.close()
        assert (after.state, after.generation) == ("Stable", before.generation)
        assert [m.group_instance_id for m in after.members.values()] == ["kept-a"]
        assert set(seen) == set(range(80))
        assert {value for value, count in seen.items() if count > 1} <= uncommitted
    finally:
        cluster.close()


def test_bad_group_requests_get_kafkas_answers_on_a_connection_that_serves_on(cluster):
    def join(group_id, session_timeout_ms=10_000, protocols=True):
        return JoinGroupRequest[5](
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=10_000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00")]
            if protocols
            else [],
        )

    with KafkaWire(cluster.kafka_address) as wire:
        answers = [
            wire.request(join(""), 5, JoinGroupResponse).error_code,
            wire.request(join("bad-input", 10), 5, JoinGroupResponse).error_code,
            wire.request(join("bad-input", protocols=False), 5, JoinGroupResponse).error_code,
        ]
        assert answers == [
            kafka.errors.InvalidGroupIdError.errno,
            kafka.errors.InvalidSessionTimeoutError.errno,
            kafka.errors.InconsistentGroupProtocolError.errno,
        ]
        sync = SyncGroupRequest[3](
            group_id="never-joined", generation_id=1, member_id="nobody", assignments=[]
        )
        assert wire.request(sync, 3, SyncGroupResponse).error_code == UNKNOWN_MEMBER_ID
        # Metadata bytes that are not a consumer subscription are the client's business.
        required = wire.request(join("bad-input"), 5, JoinGroupResponse)
        request = join("bad-input")
        request.member_id = required.member_id
        joined = wire.request(request, 5, JoinGroupResponse)
        assert joined.error_code == 0
        assert (
            cluster.gateway.coordinator.snapshot("bad-input").members[joined.member_id].topics == ()
        )
        leave = LeaveGroupRequest[3](
            group_id="bad-input",
            members=[LeaveGroupRequest.MemberIdentity(member_id=joined.member_id)],
        )
        assert wire.request(leave, 3, LeaveGroupResponse).members[0].error_code == 0


def test_a_crowd_waiting_in_one_groups_rebalance_does_not_stall_another_group(cluster):
    """Kafka parks a JoinGroup that waits for a rebalance without holding a request thread,
    so a group's members waiting on a slow member never delay another group's answers (nor
    let its members' sessions run out while their requests sit in a queue). Here 40 members
    wait in one group's rebalance for a member that does not rejoin (more than the 32
    threads the gateway's produce/fetch pool has): a lone member of another group must still
    be answered at once. The waiting crowd is then let through by the slow member leaving."""
    crowd, lone, waiting = "stall-crowd", "stall-lone", 40

    def join(group, instance, member_id=""):
        protocol = JoinGroupRequest.JoinGroupRequestProtocol(
            name="range",
            metadata=ConsumerProtocolSubscription(version=0, topics=["stall-topic"]).encode(),
        )
        return JoinGroupRequest[7](
            group_id=group,
            session_timeout_ms=30_000,
            rebalance_timeout_ms=30_000,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=[protocol],
        )

    with KafkaWire(cluster.kafka_address) as anchor:
        first = anchor.request(join(crowd, "anchor"), 7, JoinGroupResponse)
        assert first.error_code == 0 and first.leader == first.member_id
        synced = anchor.request(
            SyncGroupRequest[5](
                group_id=crowd,
                generation_id=first.generation_id,
                member_id=first.member_id,
                group_instance_id="anchor",
                protocol_type="consumer",
                protocol_name="range",
                assignments=[],
            ),
            5,
            SyncGroupResponse,
        )
        assert synced.error_code == 0
        wires = [KafkaWire(cluster.kafka_address, timeout_s=TIMEOUT_S) for _ in range(waiting)]
        try:
            # Each waits in the crowd's rebalance until the anchor rejoins or leaves.
            for i, wire in enumerate(wires):
                wire.send_raw(wire.encode(join(crowd, f"crowd-{i}"), 7))
            # The crowd's joins are in (a DescribeGroups answered after them sees them all).
            describe = DescribeGroupsRequest[0](groups=[crowd])

            def crowd_joined() -> bool:
                (group,) = anchor.request(describe, 0, DescribeGroupsResponse).groups
                return len(group.members) == waiting + 1

            assert wait_until(crowd_joined, TIMEOUT_S)
            with KafkaWire(cluster.kafka_address, timeout_s=5) as other:
                alone = other.request(join(lone, "lone"), 7, JoinGroupResponse)
                assert alone.error_code == 0 and alone.leader == alone.member_id
            leave = LeaveGroupRequest[4](
                group_id=crowd,
                members=[
                    LeaveGroupRequest.MemberIdentity(
                        member_id=first.member_id, group_instance_id="anchor"
                    )
                ],
            )
            assert anchor.request(leave, 4, LeaveGroupResponse).error_code == 0
            answers = [wire.decode(wire.read_frame(), 7, JoinGroupResponse) for wire in wires]
            # Every waiting member is let through, into one generation.
            assert {(a.error_code, a.generation_id) for a in answers} == {
                (0, first.generation_id + 1)
            }
        finally:
            for wire in wires:
                wire.close()


def test_a_static_member_that_misses_a_rebalance_keeps_its_place(cluster):
    """Kafka's coordinator ends a rebalance removing only the dynamic members that did not
    join again: a static member (restarting, say) keeps its place, its leadership goes to a
    member that joined, and it syncs into the new generation when it is back."""
    group = "static-misses-rebalance"

    def join(instance, member_id, topics):
        protocol = JoinGroupRequest.JoinGroupRequestProtocol(
            name="range",
            metadata=ConsumerProtocolSubscription(version=0, topics=topics).encode(),
        )
        return JoinGroupRequest[7](
            group_id=group,
            session_timeout_ms=30_000,
            rebalance_timeout_ms=1_000,  # the rebalance ends a second after it begins
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=[protocol],
        )

    def sync(wire, instance, member_id, generation, assignments):
        request = SyncGroupRequest[5](
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in assignments.items()
            ],
        )
        return wire.request(request, 5, SyncGroupResponse)

    with KafkaWire(cluster.kafka_address) as one, KafkaWire(cluster.kafka_address) as two:
        first = one.request(join("one", "", ["a"]), 7, JoinGroupResponse)
        assert first.error_code == 0 and first.leader == first.member_id
        assert sync(one, "one", first.member_id, first.generation_id, {}).error_code == 0
        # "two" joins: a rebalance that "one" (Stable, not heartbeating) never joins.
        second = two.request(join("two", "", ["a"]), 7, JoinGroupResponse)
        assert second.error_code == 0
        assert second.generation_id == first.generation_id + 1
        one_id, two_id = first.member_id, second.member_id
        # "one" had not joined when the rebalance ended: still a member, no longer leader.
        assert second.leader == two_id
        assert sorted(m.member_id for m in second.members) == sorted([one_id, two_id])
        given = {one_id: b"for-one", two_id: b"for-two"}
        assert sync(two, "two", two_id, second.generation_id, given).error_code == 0
        back = sync(one, "one", one_id, second.generation_id, {})
        assert (back.error_code, bytes(back.assignment)) == (0, b"for-one")
