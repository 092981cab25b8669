"""Online migration between the classic and the consumer group protocol (Kafka 4's
group.consumer.migration.policy=bidirectional): a classic group of librdkafka consumers
rolled one by one to `group.protocol=consumer` while records keep coming, then rolled back.
Nothing is skipped, and a record is read twice only where its first reader's commit was
refused (a commit that succeeded is never read past again); the group keeps its committed
offsets through both conversions. Kafka's Java consumer rolling beside librdkafka's:
test_kafka_group_migration_java.py."""

from __future__ import annotations

import threading

import confluent_kafka
import pytest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from devtools import apache_kafka
from seglog.errors import CoordinatorNotAvailableError
from services.gateway.groups import group_metrics
from services.gateway.groups.group_state import CLASSIC
from services.gateway.groups.offsets_formats import encode_subscription
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.kip848_clients import TIMEOUT_S, describe, heartbeat, new_name
from tests.waiting import wait_for

REBALANCE_IN_PROGRESS = 27


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("migration"),
        nodes=2,
        group_consumer_heartbeat_interval_ms=200,
        group_consumer_session_timeout_ms=6000,
    )
    yield c
    c.close()


class Reads:
    """Every record read: (partition, offset, reader, whether its commit succeeded)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read: list[tuple[int, int, str, bool]] = []

    def count(self) -> int:
        with self.lock:
            return len({(p, o) for p, o, _, _ in self.read})


class Reader:
    """A librdkafka consumer on its own thread, committing each record synchronously."""

    def __init__(self, cluster, group_id, topic, name, reads, protocol) -> None:
        self.name, self.reads = name, reads
        self.stop = threading.Event()
        config = {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": group_id,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        if protocol == "classic":
            config |= {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
        self.consumer = confluent_kafka.Consumer(config)
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, name=name)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            message = self.consumer.poll(0.1)
            if message is None or message.error():
                continue
            try:
                self.consumer.commit(message, asynchronous=False)
                committed = True
            except confluent_kafka.KafkaException:
                committed = False  # a rebalance refused it: the next owner reads it again
            with self.reads.lock:
                self.reads.read.append(
                    (message.partition(), message.offset(), self.name, committed)
                )
        self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(TIMEOUT_S)


class Load:
    """A producer writing numbered records across the partitions until stopped."""

    def __init__(self, cluster, topic, partitions) -> None:
        self.producer = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.kafka_address, "acks": "all", "linger.ms": 5}
        )
        self.topic, self.partitions = topic, partitions
        self.produced = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="load")
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            for _ in range(4):
                value = self.produced
                self.producer.produce(
                    self.topic, value=str(value).encode(), partition=value % self.partitions
                )
                self.produced += 1
            self.producer.poll(0)
        assert self.producer.flush(TIMEOUT_S) == 0

    def close(self) -> int:
        self.stop.set()
        self.thread.join(TIMEOUT_S)
        return self.produced


def _kind(cluster, group_id) -> str:
    if cluster.gateway.consumer_groups.has_members(group_id):
        protocols = {
            "classic" if m.classic is not None else "consumer"
            for m in cluster.gateway.consumer_groups.describe(group_id).members.values()
        }
        return "consumer group: " + "+".join(sorted(protocols))
    group = cluster.gateway.coordinator.snapshot(group_id)
    return f"classic group: {group.kind}, {len(group.members)}" if group else "none"


def test_a_classic_group_rolled_to_the_consumer_protocol_and_back_skips_nothing(cluster):
    topic, group_id, partitions = new_name("roll"), new_name("g"), 6
    cluster.admin.create_topic(topic, partitions, 2)
    reads = Reads()
    load = Load(cluster, topic, partitions)
    readers = {n: Reader(cluster, group_id, topic, n, reads, "classic") for n in "abc"}

    def progress(what: str) -> None:
        # Records produced after this point are read too: the group is serving again.
        target = load.produced + 40
        wait_for(lambda: reads.count() >= target, TIMEOUT_S, what, lambda: _kind(cluster, group_id))

    progress("the classic group reads")
    assert _kind(cluster, group_id).startswith("classic group")
    kinds = []
    for old, new, protocol in [
        ("a", "a2", "consumer"),
        ("b", "b2", "consumer"),
        ("c", "c2", "consumer"),
        ("c2", "c3", "classic"),
        ("b2", "b3", "classic"),
        ("a2", "a3", "classic"),
    ]:
        readers.pop(old).close()
        readers[new] = Reader(cluster, group_id, topic, new, reads, protocol)
        progress(f"{new} replaced {old}")
        kinds.append(_kind(cluster, group_id))
    wait_for(
        lambda: _kind(cluster, group_id) == f"classic group: {CLASSIC}, 3",
        TIMEOUT_S,
        "the downgraded group's three classic members",
        lambda: _kind(cluster, group_id),
    )
    produced = load.close()
    wait_for(lambda: reads.count() >= produced, TIMEOUT_S, "every record read")
    for reader in readers.values():
        reader.close()

    # Upgraded on the first consumer-protocol member, classic members served inside the
    # consumer group meanwhile, downgraded when the last consumer-protocol member left.
    assert kinds[0] == "consumer group: classic+consumer"
    assert kinds[2] == "consumer group: consumer"
    assert kinds[4] == "consumer group: classic+consumer"
    assert kinds[5].startswith("classic group")
    # Nothing skipped: every partition's offsets read from 0 to its end.
    for partition in range(partitions):
        offsets = {o for p, o, _, _ in reads.read if p == partition}
        assert offsets == set(range(len(offsets)))
    assert reads.count() == produced
    # None read twice past a commit: a record read again was not committed by its reader.
    first: dict[tuple[int, int], tuple[str, bool]] = {}
    for p, o, reader, committed in reads.read:
        if (p, o) in first:
            assert not first[(p, o)][1], f"{p}:{o} committed by {first[(p, o)][0]}, read again"
        else:
            first[(p, o)] = (reader, committed)
    assert len({r for _, _, r, _ in reads.read}) >= 6  # the rolls did move partitions


def _classic_join(wire, group_id, topic, member_id=""):
    request = JoinGroupRequest[5](
        group_id=group_id,
        session_timeout_ms=6000,
        rebalance_timeout_ms=6000,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequest[5].JoinGroupRequestProtocol(
                name="range", metadata=encode_subscription([topic])
            )
        ],
    )
    return wire.request(request, 5, JoinGroupResponse)


def test_a_classic_member_in_a_consumer_group_is_assigned_by_the_coordinator(cluster):
    """At the wire: a classic JoinGroup to a consumer group is answered at once with the
    member epoch as generation and no leader; SyncGroup hands the coordinator's partitions;
    when a consumer-protocol member joins, Heartbeat says REBALANCE_IN_PROGRESS and the
    partitions move only once the classic member has joined again without them."""
    topic, group_id = new_name("wire"), new_name("g")
    cluster.admin.create_topic(topic, 2, 2)
    with KafkaWire(cluster.kafka_address) as wire:
        first = heartbeat(wire, group_id, "", 0, topics=[topic])
        assert first.error_code == 0
        required = _classic_join(wire, group_id, topic)  # v5: asks for a member id first
        joined = _classic_join(wire, group_id, topic, required.member_id)
        assert joined.error_code == 0 and joined.leader == ""
        assert joined.generation_id > first.member_epoch  # its join bumped the group epoch

        def sync(generation):
            request = SyncGroupRequest[3](
                group_id=group_id,
                generation_id=generation,
                member_id=joined.member_id,
                group_instance_id=None,
                assignments=[],
            )
            return wire.request(request, 3, SyncGroupResponse)

        synced = sync(joined.generation_id)
        assert synced.error_code == 0
        classic_held = ConsumerProtocolAssignment.decode(synced.assignment).assigned_partitions
        groups = cluster.gateway.consumer_groups
        described = groups.describe(group_id)
        member = described.members[joined.member_id]
        assert member.classic is not None and member.classic.session_timeout_ms == 6000
        # What it holds now (a partition the other member still holds comes later).
        assert {(a.topic, p) for a in classic_held for p in a.partitions} == {
            (topic, p) for ps in member.assigned.values() for p in ps
        }
        assert sync(joined.generation_id - 1).error_code == 22  # ILLEGAL_GENERATION
        beat = HeartbeatRequest[3](
            group_id=group_id,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
        )
        assert wire.request(beat, 3, HeartbeatResponse).error_code == 0
        # The gauges show the group mid-migration: one member on each protocol.
        members = {
            o.attributes["seglog.group.protocol"]: o.value
            for o in group_metrics.members(cluster.gateway.coordinator, groups)
            if o.attributes["messaging.consumer.group.name"] == group_id
        }
        assert members == {"classic": 1, "consumer": 1}
        # ConsumerGroupDescribe v1 tells them apart as Kafka does (KIP-1099's MemberType).
        types = {m.member_id: m.member_type for m in describe(cluster, group_id).members}
        assert types == {joined.member_id: 0, first.member_id: 1}
        # The first member leaves: the classic member is told to join again, and is then
        # the only member; its leaving converts the group back to a classic group of one.
        left = heartbeat(wire, group_id, first.member_id, -1)
        assert left.error_code == 0
        assert cluster.gateway.coordinator.snapshot(group_id).kind == CLASSIC
        assert not cluster.gateway.consumer_groups.has_members(group_id)
        assert wire.request(beat, 3, HeartbeatResponse).error_code == REBALANCE_IN_PROGRESS
        states = {
            (o.attributes["seglog.group.protocol"], o.attributes["seglog.group.state"])
            for o in group_metrics.groups(cluster.gateway.coordinator, groups)
        }
        assert ("classic", "PreparingRebalance") in states


def test_a_classic_member_of_a_consumer_group_is_kept_across_a_gateway_restart(cluster):
    """Its ClassicMemberMetadata is in its member record (Kafka's tagged field, which Kafka's
    own decoder reads): the restarted coordinator replays it and serves its next heartbeat
    at its generation instead of forgetting it."""
    topic, group_id = new_name("restart"), new_name("g")
    cluster.admin.create_topic(topic, 2, 2)
    with KafkaWire(cluster.kafka_address) as wire:
        first = heartbeat(wire, group_id, "", 0, topics=[topic])
        required = _classic_join(wire, group_id, topic)
        joined = _classic_join(wire, group_id, topic, required.member_id)
        assert (first.error_code, joined.error_code) == (0, 0)
    cluster.restart_gateway()
    with KafkaWire(cluster.kafka_address) as wire:
        beat = HeartbeatRequest[3](
            group_id=group_id,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
        )
        assert wire.request(beat, 3, HeartbeatResponse).error_code in (0, REBALANCE_IN_PROGRESS)
    replayed = cluster.gateway.consumer_groups.describe(group_id).members[joined.member_id]
    assert replayed.classic is not None and replayed.classic.session_timeout_ms == 6000
    partition = cluster.gateway.offsets.partition_for(group_id)
    segments = sorted(cluster.root.glob(f"node-*/__consumer_offsets-{partition}/*.log"))
    done = apache_kafka.run_tool(
        "org.apache.kafka.tools.DumpLogSegments",
        "--files", str(segments[0]), "--offsets-decoder", "--print-data-log",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert '"classicMemberMetadata":{"sessionTimeoutMs":6000' in done.stdout.decode()


def test_a_classic_join_racing_an_upgrade_does_not_make_a_second_group(cluster):
    """A JoinGroup routed to the classic coordinator just before an upgrade took the group
    reaches it after: the coordinator refuses to start a classic group under an id a consumer
    group holds (the client retries and is served inside the consumer group)."""
    topic, group_id = new_name("race"), new_name("g")
    cluster.admin.create_topic(topic, 1, 2)
    with KafkaWire(cluster.kafka_address) as wire:
        assert heartbeat(wire, group_id, "", 0, topics=[topic]).error_code == 0
    with pytest.raises(CoordinatorNotAvailableError, match="changed protocol"):
        cluster.gateway.coordinator.classic.start_join_classic(
            group_id,
            "",
            group_instance_id=None,
            client_id="late",
            client_host="/127.0.0.1",
            protocol_type="consumer",
            protocols=[("range", encode_subscription([topic]))],
            session_timeout_ms=6000,
            rebalance_timeout_ms=6000,
            require_known_member_id=False,
        )
    assert cluster.gateway.coordinator.snapshot(group_id) is None
