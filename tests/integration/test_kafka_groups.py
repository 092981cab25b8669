"""Consumer groups over Kafka's protocol with Kafka's own clients: librdkafka (confluent-kafka)
and kafka-python consumers subscribe as groups of Kafka's classic protocol (the leader member
assigns), rebalance as members come and go, commit and read their offsets; static members
restart, or miss a rebalance, without losing their place; a crowd waiting in one group's
rebalance does not stall another group. The authorizer off, then on."""

from __future__ import annotations

from collections import Counter

import confluent_kafka
import confluent_kafka.admin
import kafka
import pytest
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription,
)
from kafka.structs import TopicPartition as KafkaTopicPartition

from seglog.client.consumer import Consumer
from seglog.client.structs import TopicPartition
from tests.authorizer_modes import AUTHORIZER_MODES
from tests.kafka_group_clients import (
    PARTITIONS,
    TIMEOUT_S,
    Reader,
    cluster_per_authorizer_mode,
    create_topic,
    poll_until,
    produce,
    rdkafka_consumer,
)
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until


@pytest.fixture(scope="module", params=AUTHORIZER_MODES)
def cluster(request, tmp_path_factory):
    yield from cluster_per_authorizer_mode(request, tmp_path_factory)


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
