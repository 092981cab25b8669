"""Follower fetch sessions (services/storage_node/fetch_sessions.py, Kafka's KIP-227) on a
real cluster, on both paths a follower fetches by (the bulk listener, and gRPC when the
cluster has no secret): an idle follower names no partition and an idle leader answers none;
a session the leader lost is opened again with a full request and nothing is lost; an idle
in-sync follower stays in the ISR; and an append wakes only its partition's waiters."""

from __future__ import annotations

import threading
import time

import pytest

from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until

LAG_MS = 1000
FAST = {
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "replica.lag.time.max.ms": str(LAG_MS),
}
PARTITIONS = 12


@pytest.fixture(params=["bulk", "grpc"])
def cluster(tmp_path, request):
    secret = {} if request.param == "bulk" else {"cluster_secret": None}
    c = LocalCluster(tmp_path, nodes=2, node_configs=FAST, **secret)
    yield c
    c.close()


class SessionRequests:
    """Every fetch-session request a node serves, as seen by its replica manager (the real
    method still answers): partitions named, forgotten, and what the round answered."""

    def __init__(self, node, monkeypatch) -> None:
        self.seen: list[tuple[int, int, int, int]] = []  # (epoch, named, forgotten, answered)
        self.errors: list[int] = []
        self._lock = threading.Lock()
        original = node.replicas.session_fetch

        def recording(request, client_epoch, is_active):
            found = original(request, client_epoch, is_active)
            with self._lock:
                self.seen.append(
                    (
                        request.session_epoch,
                        len(request.partitions),
                        len(request.forgotten_partitions),
                        len(found.states),
                    )
                )
                if found.error:
                    self.errors.append(found.error)
            return found

        monkeypatch.setattr(node.replicas, "session_fetch", recording)

    def since(self, start: int) -> list[tuple[int, int, int, int]]:
        with self._lock:
            return list(self.seen[start:])

    def __len__(self) -> int:
        with self._lock:
            return len(self.seen)


def _produce_everywhere(cluster, topic, value):
    for partition in range(PARTITIONS):
        [result] = cluster.client.produce(topic, {partition: make_batch([value])}, acks=-1)
        assert result.error == 0


def _in_step(cluster, topic):
    """Every replica of every partition has the same log end and high watermark."""
    for partition in range(PARTITIONS):
        logs = [node.logs.get_log(topic, partition) for node in cluster.nodes.values()]
        ends = {log.log_end_offset for log in logs}
        if len(ends) != 1 or {log.high_watermark for log in logs} != ends:
            return False
    return True


def _spied(cluster, monkeypatch):
    return {node_id: SessionRequests(node, monkeypatch) for node_id, node in cluster.nodes.items()}


def _quiet(spy) -> bool:
    last = spy.since(max(len(spy) - 2, 0))
    return len(last) == 2 and all(named == answered == 0 for _, named, _, answered in last)


def _idle_rounds(spies, count):
    """Wait until each leader has served `count` more rounds: what those rounds were."""
    marks = {node_id: len(spy) for node_id, spy in spies.items()}
    assert wait_until(lambda: all(len(s) >= marks[n] + count for n, s in spies.items()))
    return {node_id: spy.since(marks[node_id]) for node_id, spy in spies.items()}


def test_an_idle_follower_names_no_partition_and_an_idle_leader_answers_none(cluster, monkeypatch):
    cluster.admin.create_topic("idle", PARTITIONS, 2)
    spies = _spied(cluster, monkeypatch)
    _produce_everywhere(cluster, "idle", b"a")
    assert wait_until(lambda: _in_step(cluster, "idle"))
    # Once in step, a round may still carry the last high watermark: wait for quiet ones.
    assert wait_until(lambda: all(_quiet(spy) for spy in spies.values()))
    rounds = _idle_rounds(spies, 5)
    for node_id, seen in rounds.items():
        assert seen, node_id
        assert all(named == 0 and answered == 0 for _, named, _, answered in seen), seen
        epochs = [epoch for epoch, *_ in seen]
        assert epochs == list(range(epochs[0], epochs[0] + len(epochs)))  # one session


def test_a_lost_session_is_opened_again_with_a_full_request_and_nothing_is_lost(
    cluster, monkeypatch
):
    cluster.admin.create_topic("lost", PARTITIONS, 2)
    _produce_everywhere(cluster, "lost", b"before")
    assert wait_until(lambda: _in_step(cluster, "lost"))
    spies = _spied(cluster, monkeypatch)
    _idle_rounds(spies, 2)
    for node in cluster.nodes.values():
        node.replicas.fetch_sessions.evict_all()  # as the bounded cache evicts
    _produce_everywhere(cluster, "lost", b"after")
    assert wait_until(lambda: _in_step(cluster, "lost"))
    for node_id, spy in spies.items():
        assert common_pb2.FETCH_SESSION_ID_NOT_FOUND in spy.errors, node_id
        # The follower's new session began with every partition it follows from this node.
        led = sum(
            1
            for p in range(PARTITIONS)
            if cluster.gateway.registry.route("lost", p).leader == node_id
        )
        full = [named for epoch, named, _, _ in spy.since(0) if epoch == 0]
        assert full and full[0] == led, (node_id, full, led)
    for partition in range(PARTITIONS):
        contents = {
            node.logs.get_log("lost", partition).read(0, 1 << 20) for node in cluster.nodes.values()
        }
        assert len(contents) == 1
        assert cluster.nodes[1].logs.get_log("lost", partition).log_end_offset == 2


def test_an_idle_in_sync_follower_stays_in_the_isr_past_the_lag_time(cluster, monkeypatch):
    cluster.admin.create_topic("quiet", PARTITIONS, 2)
    _produce_everywhere(cluster, "quiet", b"a")
    assert wait_until(lambda: _in_step(cluster, "quiet"))
    spies = _spied(cluster, monkeypatch)
    started = time.monotonic()
    # Idle rounds go on (they name nothing) well past the lag time: the leaders' ISR checks
    # (every lag/2) run several times meanwhile.
    assert wait_until(lambda: time.monotonic() - started > 3 * LAG_MS / 1000, timeout_s=10)
    assert all(named == 0 for spy in spies.values() for _, named, _, _ in spy.since(0))
    for partition in range(PARTITIONS):
        registration = cluster.gateway.registry.topic("quiet").partitions[partition]
        assert sorted(registration.isr) == [1, 2], partition
        replicas = cluster.nodes[registration.leader].replicas
        held = replicas.partition("quiet", partition)
        assert held.shrink_proposal(LAG_MS) is None
        # An append moves the log end past the idle follower's last named fetch: until it
        # fetches again (held off here by the partition's lock), it must not look behind
        # since then, only since its session's last request.
        with held._lock:
            replicas.append("quiet", [(partition, make_batch([b"b"]), -1)])
            assert held.shrink_proposal(LAG_MS) is None, partition
    assert wait_until(lambda: _in_step(cluster, "quiet"))
    _produce_everywhere(cluster, "quiet", b"c")  # acks=all still goes through both
    for partition in range(PARTITIONS):
        assert sorted(cluster.gateway.registry.topic("quiet").partitions[partition].isr) == [1, 2]


@pytest.mark.parametrize("path", ["bulk", "grpc"])
def test_a_follower_is_answered_for_records_and_learns_the_watermark_with_the_next(
    tmp_path, monkeypatch, path
):
    # Kafka's delayed fetch completes on bytes: a new high watermark alone does not answer a
    # waiting follower (the wait here is longer than the test), it goes with the next
    # records. One acks=all produce is then one round per follower, not two.
    secret = {} if path == "bulk" else {"cluster_secret": None}
    slow = {**FAST, "replica.fetch.wait.max.ms": "60000", "replica.lag.time.max.ms": "60000"}
    cluster = LocalCluster(tmp_path, nodes=2, node_configs=slow, **secret)
    try:
        cluster.admin.create_topic("watermarks", 1, 2)
        leader = cluster.leader_of("watermarks", 0)
        follower = next(n for n in cluster.nodes.values() if n is not leader)
        spy = SessionRequests(leader, monkeypatch)
        follower_log = follower.logs.get_log("watermarks", 0)
        # A new topic's leader may not serve yet: its refusals write nothing, so the first
        # record is sent until it is taken. The round answering it may have begun before
        # the spy: the rounds counted begin after.
        refusals = ("NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION")

        def first_taken() -> bool:
            [result] = cluster.client.produce("watermarks", {0: make_batch([b"first"])}, acks=-1)
            assert result.error == 0 or common_pb2.ErrorCode.Name(result.error) in refusals
            return result.error == 0 and result.base_offset == 0

        assert wait_until(first_taken)
        assert wait_until(lambda: follower_log.log_end_offset == 1)  # following, in the ISR
        mark = len(spy)
        produced = 11
        for i in range(1, produced):
            [result] = cluster.client.produce("watermarks", {0: make_batch([b"w%d" % i])}, acks=-1)
            assert result.error == 0 and result.base_offset == i
        answered = [answered for *_, answered in spy.since(mark) if answered]
        assert answered == [1] * (produced - 1), spy.since(0)
        # Acknowledged up to offset 11 on the leader; the follower was last answered with the
        # records of offset 10, when the watermark was 10.
        assert leader.logs.get_log("watermarks", 0).high_watermark == produced
        assert follower_log.log_end_offset == produced
        assert follower_log.high_watermark == produced - 1
        [result] = cluster.client.produce("watermarks", {0: make_batch([b"next"])}, acks=-1)
        assert result.error == 0
        assert wait_until(lambda: follower_log.high_watermark == produced)
    finally:
        cluster.close()
