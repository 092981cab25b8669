"""Several gateways on one registry in etcd (real etcd, real processes): the controller
killed or paused, a group's coordinator killed, etcd itself restarted — the cluster carries
on, loses no acknowledged record, and a deposed controller writes nothing."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from seglog.client.admin import Admin
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.errors import NotCoordinatorError, SeglogError
from seglog.rpc.status import error_from_rpc
from seglog.v1 import groups_pb2, groups_pb2_grpc
from tests.batches import make_batch
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 10  # a lease TTL, with room for a slow machine


@pytest.fixture
def cluster(tmp_path):
    running = EtcdBackedCluster(tmp_path)
    yield running
    running.close()


class Load:
    """acks=all records with ids sent on a thread until stopped; the acknowledged ids kept."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acknowledged: set[int] = set()
        self._stop = threading.Event()
        self._producer = Producer(
            bootstrap, acks="all", linger_ms=1, retries=1000, retry_backoff_ms=50,
            delivery_timeout_ms=120_000, request_timeout_ms=5000,
        )  # fmt: skip
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            futures = []
            for _ in range(20):
                futures.append((i, self._producer.send(self._topic, b"%d" % i, key=b"%d" % i)))
                i += 1
            for record_id, future in futures:
                try:
                    future.get(timeout=120)
                    self.acknowledged.add(record_id)
                except SeglogError:
                    pass  # not acknowledged: may or may not be there

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=150)
        self._producer.close()


def read_all(bootstrap: str, topic: str, partitions: int) -> list[int]:
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        out: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out.extend(int(r.value) for r in consumer.poll_records(timeout_ms=500))
            if all(consumer.position(tp) >= end for tp, end in ends.items()):
                return out
        raise AssertionError("could not read the topic to its end")


def leader_of(cluster, index: int, topic: str, partition: int) -> int:
    with cluster.admin(index) as admin:
        return admin.describe_topic(topic).partitions[partition].leader


@pytest.mark.long  # a paused controller stays in make test
@pytest.mark.slow
def test_the_controller_killed_under_acks_all_load(cluster):
    a, b = cluster.gateway_addresses
    with cluster.admin(1) as admin:
        admin.create_topic("orders", 3, 3)
    load = Load(cluster.bootstrap, "orders")
    try:
        assert wait_until(lambda: len(load.acknowledged) > 200, 60)
        cluster.gateways[0].kill()  # the controller, and the nodes' first gateway
        assert wait_until(lambda: cluster.controller(1) == b, TAKEOVER_S)
        acknowledged_before = len(load.acknowledged)
        assert wait_until(lambda: len(load.acknowledged) > acknowledged_before + 200, 60)
        # The new controller fails leaders over when a node dies afterwards.
        victim = leader_of(cluster, 1, "orders", 0)
        cluster.nodes[victim].kill()
        assert wait_until(
            lambda: leader_of(cluster, 1, "orders", 0) not in (victim, -1), TAKEOVER_S
        )
        acknowledged_before = len(load.acknowledged)
        assert wait_until(lambda: len(load.acknowledged) > acknowledged_before + 200, 60)
    finally:
        load.stop()
    stored = read_all(b, "orders", 3)
    assert load.acknowledged <= set(stored), "an acknowledged record was lost"
    assert "is the controller" in cluster.log("gateway-1")


@pytest.mark.long  # test_kafka_group_failover.py's coordinating gateway stays in make test
@pytest.mark.slow
def test_a_groups_coordinating_gateway_killed_while_it_consumes(cluster):
    with cluster.admin(0) as admin:
        admin.create_topic("events", 2, 3)
    with Producer(cluster.bootstrap, acks="all", linger_ms=0) as producer:
        for i in range(300):
            producer.send("events", b"%d" % i, key=b"%d" % i)
        producer.flush()
    seen: list[int] = []
    committed_before_kill: dict[TopicPartition, int] = {}
    with Consumer(
        cluster.bootstrap, group_id="readers", auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=2000, heartbeat_interval_ms=200,
        max_poll_records=50,
    ) as consumer:  # fmt: skip
        consumer.subscribe(["events"])
        while len(seen) < 120:
            seen.extend(int(r.value) for r in consumer.poll_records(timeout_ms=500))
            consumer.commit()
        coordinator = consumer._client.group_coordinators.coordinator_of("readers")
        assert coordinator in cluster.gateway_addresses
        index = cluster.gateway_addresses.index(coordinator)
        other = cluster.gateway_addresses[1 - index]
        # The other gateway refuses the group's calls, naming the coordinator.
        with grpc.insecure_channel(other) as channel:
            stub = groups_pb2_grpc.GroupCoordinatorStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.FetchOffsets(groups_pb2.FetchOffsetsRequest(group_id="readers"), timeout=5)
            error = error_from_rpc(refused.value)
            assert isinstance(error, NotCoordinatorError) and error.coordinator == coordinator
        tps = [TopicPartition("events", p) for p in (0, 1)]
        committed_before_kill = {
            tp: meta.offset for tp, meta in consumer.committed(tps).items() if meta is not None
        }
        cluster.gateways[index].kill()
        with Producer(other, acks="all", linger_ms=0) as producer:
            for i in range(300, 600):
                producer.send("events", b"%d" % i, key=b"%d" % i)
            producer.flush()

        def committed_at_the_new_coordinator() -> int:
            with Admin(other) as admin:
                return sum(o.committed for o in admin.list_group_offsets("readers").values())

        deadline = time.monotonic() + 60 + TAKEOVER_S
        while time.monotonic() < deadline:
            seen.extend(int(r.value) for r in consumer.poll_records(timeout_ms=500))
            try:
                consumer.commit()
            except SeglogError:
                continue  # the group is moving: commit after the next poll
            if len(set(seen)) == 600 and committed_at_the_new_coordinator() == 600:
                break
        assert consumer._client.group_coordinators.coordinator_of("readers") == other
    assert set(seen) == set(range(600))
    assert committed_at_the_new_coordinator() == 600
    # It resumed from its commits: what it read twice is at most what followed them.
    duplicates = len(seen) - len(set(seen))
    assert duplicates <= 600 - sum(committed_before_kill.values()), duplicates


@pytest.mark.slow
def test_a_paused_controller_comes_back_fenced_and_steps_down(tmp_path):
    # The nodes heartbeat to the second gateway first: the paused one is the controller only.
    cluster = EtcdBackedCluster(tmp_path, node_gateway_order=[1, 0])
    try:
        a, b = cluster.gateway_addresses
        with cluster.admin(1) as admin:
            admin.create_topic("before", 3, 3)
        cluster.pause(cluster.gateways[0])
        assert wait_until(lambda: cluster.controller(1) == b, TAKEOVER_S)
        # While it is away the new controller decides: a node dies, its leaderships move.
        victim = leader_of(cluster, 1, "before", 0)
        cluster.nodes[victim].kill()
        assert wait_until(lambda: leader_of(cluster, 1, "before", 0) not in (victim, -1), 30)
        after_failover = {p: leader_of(cluster, 1, "before", p) for p in range(3)}
        cluster.resume(cluster.gateways[0])
        # Back, it learns it was deposed and steps down; its stale view writes nothing.
        assert wait_until(lambda: cluster.controller(0) == b, TAKEOVER_S)
        assert wait_until(
            lambda: "no longer the controller" in cluster.log("gateway-0"), TAKEOVER_S
        )
        assert cluster.controller(1) == b
        # Its view catches up from etcd a moment after it steps down; had its stale view
        # written anything, the leaders would differ for good.
        assert wait_until(
            lambda: {p: leader_of(cluster, 0, "before", p) for p in range(3)} == after_failover
        )
        assert {p: leader_of(cluster, 1, "before", p) for p in range(3)} == after_failover
        # It serves again, on the shared registry.
        with cluster.admin(0) as admin:
            admin.create_topic("after", 1, 2)
        with cluster.client(0) as client:
            [result] = client.produce("after", {0: make_batch([b"x"])})
            assert not result.error
    finally:
        cluster.close()


@pytest.mark.long  # a paused controller stays in make test
@pytest.mark.slow
def test_etcd_restarted_while_the_cluster_runs(cluster):
    with cluster.admin(0) as admin:
        admin.create_topic("steady", 2, 3)
    leaders = {p: leader_of(cluster, 0, "steady", p) for p in range(2)}
    cluster.etcd.stop()
    # The data path goes on with the metadata every gateway holds.
    for index in (0, 1):
        with cluster.client(index) as client:
            for partition in (0, 1):
                [result] = client.produce("steady", {partition: make_batch([b"during"])})
                assert not result.error, result.error_message
    # Metadata changes wait for etcd, with a retriable error.
    with cluster.admin(0) as admin:
        with pytest.raises(SeglogError) as refused:
            admin.create_topic("later", 1, 3)
        assert refused.value.retriable
    # Longer than a session: nodes must not be declared dead for etcd's absence.
    assert not wait_until(lambda: len(cluster.live_nodes(0)) < 3, 2 * SESSION_TIMEOUT_MS / 1000)
    cluster.etcd.start()
    with cluster.admin(1) as admin:
        assert wait_until(lambda: _try_create(admin, "later"), 30)
    # The other gateway hears of it by the watch.
    with cluster.client(0) as client, cluster.admin(0) as admin:
        assert wait_until(lambda: "later" in [t.name for t in client.list_topics()], 15)
        assert {p: admin.describe_topic("steady").partitions[p].leader for p in (0, 1)} == leaders
        ends = client.list_offsets("steady", {0: -1, 1: -1})
        assert ends[0].offset == 2 and ends[1].offset == 2
    assert sorted(cluster.live_nodes(1)) == [1, 2, 3]


def _try_create(admin, name: str) -> bool:
    try:
        admin.create_topic(name, 1, 3)
        return True
    except SeglogError as exc:
        return exc.reason == "TOPIC_ALREADY_EXISTS"
