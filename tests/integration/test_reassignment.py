"""Moving partitions on a real four-node cluster (in-process gateway and nodes on loopback):
a move from nodes {1,2,3} to {2,3,4} under acks=all load losing nothing with its catch-up
held to the throttle, a cancel that restores the original replicas, a gateway restart in the
middle of a move, preferred-leader elections, log dirs, and the CLI's plans (bad ones refused
whole, before anything changes), and Kafka's own admin client doing the same over Kafka's
protocol."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidReplicationAssignmentError

from seglog.client import Consumer, Producer
from seglog.client.structs import TopicPartition
from tests.cluster import LocalCluster, cli_in_process
from tests.waiting import wait_for, wait_until

FAST = {
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "replica.lag.time.max.ms": "2000",
}
THROTTLE_BYTES_PER_S = 400_000
RECORD = b"x" * 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("reassign"), nodes=4, node_configs=FAST)
    yield c
    c.close()


def _registration(cluster, topic, partition=0):
    return cluster.gateway.registry.topic(topic).partitions[partition]


def _move(cluster, topic, replicas, *, throttle=0, partition=0):
    cluster.admin.alter_partition_reassignments(
        {TopicPartition(topic, partition): replicas}, throttle_bytes_per_s=throttle
    )


def _moved(cluster, topic, partition=0):
    return not cluster.admin.list_partition_reassignments([TopicPartition(topic, partition)])


def _topic_on(cluster, topic, replicas, partitions=1, **configs):
    """A topic whose partitions sit on `replicas` (placed, then moved there while empty)."""
    cluster.admin.create_topic(topic, partitions, len(replicas), configs=configs)
    for p in range(partitions):
        _move(cluster, topic, replicas, partition=p)
    wait_for(
        lambda: all(_moved(cluster, topic, p) for p in range(partitions)),
        15,
        f"{topic} placed on {replicas}",
    )
    for p in range(partitions):
        assert _registration(cluster, topic, p).replicas == replicas


def _log_end(cluster, node_id, topic, partition=0):
    if (topic, partition) not in cluster.nodes[node_id].replicas.hosted():
        return -1
    return cluster.nodes[node_id].logs.get_log(topic, partition).log_end_offset


def _fill(cluster, topic, count, partition=0):
    with Producer(cluster.address, linger_ms=5) as producer:
        producer.send_many(topic, [RECORD] * count, partition=partition).get(timeout=30)


def _read_values(cluster, topic, expected, partition=0):
    consumer = Consumer(cluster.address, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, partition)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < expected and time.monotonic() < deadline:
        out.extend(r.value for r in consumer.poll_records(timeout_ms=300))
    consumer.close()
    return out


class _Load:
    """A producer sending acks=all throughout, remembering what was acknowledged."""

    def __init__(self, cluster, topic):
        self.acknowledged: list[bytes] = []
        self.errors: list[Exception] = []
        self._stop = threading.Event()
        self._producer = Producer(cluster.address, acks="all", linger_ms=5)
        self._thread = threading.Thread(target=self._run, args=(topic,), daemon=True)
        self._thread.start()

    def _run(self, topic):
        i = 0
        while not self._stop.is_set():
            value = b"load-%08d" % i
            i += 1
            try:
                self._producer.send(topic, value, partition=0).get(timeout=30)
                self.acknowledged.append(value)
            except Exception as exc:  # recorded: an error is not an acknowledgement
                self.errors.append(exc)
            self._stop.wait(0.002)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=40)
        self._producer.close()


@pytest.mark.slow
def test_a_move_under_acks_all_load_loses_nothing_and_keeps_to_its_throttle(cluster):
    _topic_on(cluster, "moving", [1, 2, 3], **{"min.insync.replicas": "2"})
    _fill(cluster, "moving", 1200)  # ~1.2 MB for node 4 to copy
    load = _Load(cluster, "moving")
    wait_for(lambda: len(load.acknowledged) >= 50, 15, "the load running")
    throttle = cluster.nodes[4].replicas.follower_fetchers.throttle
    charged_before = throttle.throttled_bytes
    end_at_start = cluster.nodes[1].logs.get_log("moving", 0).log_end_offset

    _move(cluster, "moving", [2, 3, 4], throttle=THROTTLE_BYTES_PER_S)
    ongoing = cluster.admin.list_partition_reassignments()[TopicPartition("moving", 0)]
    assert ongoing.adding == (4,) and ongoing.removing == (1,)
    assert ongoing.target == (2, 3, 4)
    samples = []  # (time, bytes node 4 copied under the throttle) until it has caught up
    started = time.monotonic()
    while not _moved(cluster, "moving") and time.monotonic() - started < 60:
        samples.append((time.monotonic(), throttle.throttled_bytes - charged_before))
        if _log_end(cluster, 4, "moving") >= end_at_start:
            break
        time.sleep(0.05)
    wait_for(lambda: _moved(cluster, "moving"), 30, "the move finished")
    load_during_move = len(load.acknowledged)
    wait_for(lambda: len(load.acknowledged) > load_during_move + 50, 15, "load after the move")
    load.stop()

    p = _registration(cluster, "moving")
    assert p.replicas == [2, 3, 4] and sorted(p.isr) == [2, 3, 4] and p.leader in (2, 3, 4)
    assert ("moving", 0) not in cluster.nodes[1].replicas.hosted()
    # Nothing lost: every acknowledged record is there, once.
    values = _read_values(cluster, "moving", 1200 + len(load.acknowledged))
    loaded = [v for v in values if v.startswith(b"load-")]
    assert len(values) == 1200 + len(loaded)
    assert set(load.acknowledged) <= set(loaded)
    assert len(set(loaded)) == len(loaded)
    # The throttle: node 4's catch-up (what the leader held when the move began) was copied
    # at no more than the rate, give or take one round's share.
    copying = [(t, b) for t, b in samples if b > 0]
    (first_t, first_b), (last_t, last_b) = copying[0], copying[-1]
    copied = last_b - first_b
    assert copied > 800_000, copying[-5:]
    rate = copied / (last_t - first_t)
    assert rate <= THROTTLE_BYTES_PER_S * 1.25, f"{rate:.0f} B/s over {last_t - first_t:.1f} s"
    print(f"catch-up at {rate:.0f} B/s under a {THROTTLE_BYTES_PER_S} B/s throttle")


def test_cancel_in_the_middle_restores_the_original_replicas(
    cluster, tmp_path, capsys, monkeypatch
):
    _topic_on(cluster, "cancelled", [1, 2, 3])
    _fill(cluster, "cancelled", 600)
    _move(cluster, "cancelled", [2, 3, 4], throttle=10_000)  # ~60 s to copy: still moving
    assert not _moved(cluster, "cancelled")
    code, out, _ = cli_in_process(cluster, capsys, monkeypatch, "topics", "describe", "cancelled")
    assert code == 0 and "Adding Replicas: 4\tRemoving Replicas: 1" in out, out
    assert wait_until(lambda: ("cancelled", 0) in cluster.nodes[4].replicas.hosted(), 10)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": "cancelled", "partition": 0, "replicas": [2, 3, 4]}],
            }
        )
    )
    code, out, _ = cli_in_process(
        cluster,
        capsys,
        monkeypatch,
        "topics",
        "reassign",
        "--reassignment-json-file",
        str(plan),
        "--verify",
    )
    assert code == 1 and "Reassignment of partition cancelled-0 is still in progress." in out
    code, out, _ = cli_in_process(
        cluster,
        capsys,
        monkeypatch,
        "topics",
        "reassign",
        "--reassignment-json-file",
        str(plan),
        "--cancel",
    )
    assert code == 0 and "Successfully cancelled partition reassignments for: cancelled-0" in out
    p = _registration(cluster, "cancelled")
    assert sorted(p.replicas) == [1, 2, 3] and not p.adding and not p.removing
    assert 4 not in p.isr and p.leader in (1, 2, 3)
    assert wait_until(lambda: ("cancelled", 0) not in cluster.nodes[4].replicas.hosted(), 10)
    assert len(_read_values(cluster, "cancelled", 600)) == 600


@pytest.mark.long  # moves under load and cancelled stay in make test
@pytest.mark.slow
def test_a_gateway_restart_in_the_middle_of_a_move_completes_it(cluster):
    _topic_on(cluster, "restarted", [1, 2, 3])
    _fill(cluster, "restarted", 600)
    _move(cluster, "restarted", [4, 2, 3], throttle=150_000)  # ~4 s to copy
    cluster.restart_gateway()
    # The new gateway read the move from the metadata log, and its controller finishes it.
    ongoing = cluster.admin.list_partition_reassignments()
    assert ongoing[TopicPartition("restarted", 0)].adding == (4,)
    wait_for(lambda: _moved(cluster, "restarted"), 60, "the move after a restart")
    p = _registration(cluster, "restarted")
    assert p.replicas == [4, 2, 3] and p.leader in (2, 3, 4)
    assert len(_read_values(cluster, "restarted", 600)) == 600


def test_preferred_leader_election_and_log_dirs(cluster, capsys, monkeypatch):
    _topic_on(cluster, "elected", [1, 2, 3])
    _fill(cluster, "elected", 50)
    leader = _registration(cluster, "elected").leader
    preferred = next(n for n in (1, 2, 3) if n != leader)
    # A reorder moves no data: it completes at once, and `preferred` is the first replica.
    _move(cluster, "elected", [preferred, *(n for n in (1, 2, 3) if n != preferred)])
    assert _moved(cluster, "elected")
    assert _registration(cluster, "elected").leader == leader
    code, out, _ = cli_in_process(
        cluster,
        capsys,
        monkeypatch,
        "elect-leaders",
        "--election-type",
        "preferred",
        "--topic",
        "elected",
        "--partition",
        "0",
    )
    assert code == 0 and "elected-0" in out, out
    assert _registration(cluster, "elected").leader == preferred
    code, out, _ = cli_in_process(
        cluster, capsys, monkeypatch, "elect-leaders", "--election-type", "preferred",
        "--topic", "elected", "--partition", "0",
    )  # fmt: skip
    assert code == 0 and "ELECTION_NOT_NEEDED" in out

    wait_for(
        lambda: all(
            cluster.nodes[n].logs.get_log("elected", 0).log_end_offset == 50 for n in (1, 2, 3)
        ),
        15,
        "replicas caught up",
    )
    code, out, _ = cli_in_process(
        cluster, capsys, monkeypatch, "log-dirs", "--describe", "--topic-list", "elected"
    )
    assert code == 0
    brokers = {b["broker"]: b for b in json.loads(out)["brokers"]}
    assert sorted(brokers) == [1, 2, 3, 4]
    for node in (1, 2, 3):
        [entry] = brokers[node]["logDirs"][0]["partitions"]
        assert entry["partition"] == "elected-0" and entry["size"] > 50 * 1000
    assert brokers[4]["logDirs"][0]["partitions"] == []


def test_the_cli_runs_a_plan_and_refuses_bad_ones_whole(cluster, tmp_path, capsys, monkeypatch):
    cluster.admin.create_topic("planned", 2, 2)
    before = [list(_registration(cluster, "planned", p).replicas) for p in (0, 1)]

    def reassign(*argv):
        return cli_in_process(cluster, capsys, monkeypatch, "topics", "reassign", *argv)

    def plan_file(entries, name="plan.json"):
        path = tmp_path / name
        path.write_text(json.dumps({"version": 1, "partitions": entries}))
        return str(path)

    good = {"topic": "planned", "partition": 0, "replicas": [4, 3]}
    bad_plans = {
        "unknown node": [good, {"topic": "planned", "partition": 1, "replicas": [1, 9]}],
        "repeat": [good, {"topic": "planned", "partition": 1, "replicas": [2, 2]}],
        "does not exist": [good, {"topic": "planned", "partition": 7, "replicas": [1, 2]}],
        "empty": [good, {"topic": "planned", "partition": 1, "replicas": []}],
    }
    for message, entries in bad_plans.items():
        code, out, err = reassign("--reassignment-json-file", plan_file(entries), "--execute")
        assert code == 1 and message in err, (message, err)
        assert "Successfully started" not in out
        assert [_registration(cluster, "planned", p).replicas for p in (0, 1)] == before
        assert not cluster.admin.list_partition_reassignments()

    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "planned"}]}))
    code, out, _ = reassign(
        "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "3,4"
    )
    assert code == 0
    current_text, proposed_text = out.split("Proposed partition reassignment configuration")
    current = json.loads(current_text.split("\n", 1)[1])
    proposed = json.loads(proposed_text)
    assert [p["replicas"] for p in current["partitions"]] == before
    assert all(sorted(p["replicas"]) == [3, 4] for p in proposed["partitions"])
    plan = tmp_path / "proposed.json"
    plan.write_text(proposed_text)

    code, out, _ = reassign("--reassignment-json-file", str(plan), "--execute")
    assert (
        code == 0 and "Successfully started partition reassignments for planned-0,planned-1" in out
    )
    rollback = json.loads(out.split("Current partition replica assignment")[1].split("Save")[0])
    assert [p["replicas"] for p in rollback["partitions"]] == before

    def verified():
        return reassign("--reassignment-json-file", str(plan), "--verify")[0] == 0

    wait_for(verified, 30, "the plan verified")
    code, out, _ = reassign("--reassignment-json-file", str(plan), "--verify")
    assert "Reassignment of partition planned-0 is completed." in out
    assert "Reassignment of partition planned-1 is completed." in out
    assert "Throttle removed" in out
    for p in proposed["partitions"]:
        assert _registration(cluster, "planned", p["partition"]).replicas == p["replicas"]


def _spread(cluster):
    """Replicas and leaders per node."""
    held, led = {}, {}
    for p in cluster.gateway.registry.topic("spread").partitions:
        for r in p.replicas:
            held[r] = held.get(r, 0) + 1
        led[p.leader] = led.get(p.leader, 0) + 1
    return held, led


def test_a_new_node_balanced_then_decommissioned_and_stopped(tmp_path, capsys, monkeypatch):
    cluster = LocalCluster(tmp_path, nodes=3, node_configs=FAST)
    try:
        cluster.admin.create_topic("spread", 6, 2)
        for p in range(6):
            _fill(cluster, "spread", 100, partition=p)
        cluster.start_node(4)

        code, out, err = cli_in_process(cluster, capsys, monkeypatch, "nodes", "balance")
        assert code == 0, err
        assert "-> [" in out and "every move is complete" in out  # it said what it moved
        held, led = _spread(cluster)
        assert sorted(held) == [1, 2, 3, 4] and max(held.values()) - min(held.values()) <= 1
        assert wait_until(lambda: len(_spread(cluster)[1]) == 4, 10), _spread(cluster)
        led = _spread(cluster)[1]
        assert max(led.values()) - min(led.values()) <= 1, led

        code, out, err = cli_in_process(
            cluster, capsys, monkeypatch, "nodes", "decommission", "--node", "4"
        )
        assert code == 0, err
        assert "Node 4 holds no replica" in out
        assert 4 not in _spread(cluster)[0]
        assert not cluster.gateway.registry.image.hosted.get(4)
        cluster.stop_node(4)
        for p in range(6):
            assert len(_read_values(cluster, "spread", 100, partition=p)) == 100
    finally:
        cluster.close()


def test_kafkas_admin_client_moves_lists_elects_and_describes_log_dirs(cluster):
    _topic_on(cluster, "kafka-moved", [1, 2, 3])
    _fill(cluster, "kafka-moved", 300)
    tp = KafkaTopicPartition("kafka-moved", 0)
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_address)
    try:
        refused = admin.alter_partition_reassignments({tp: [1, 9]})
        assert refused == {tp: InvalidReplicationAssignmentError}
        assert admin.list_partition_reassignments() == {}
        cluster.admin.alter_partition_reassignments(  # held mid-move by a throttle
            {TopicPartition("kafka-moved", 0): [2, 3, 4]}, throttle_bytes_per_s=30_000
        )
        ongoing = admin.list_partition_reassignments()
        assert ongoing[tp]["adding_replicas"] == [4] and ongoing[tp]["removing_replicas"] == [1]
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}  # cancelled
        assert admin.list_partition_reassignments() == {}
        assert sorted(_registration(cluster, "kafka-moved").replicas) == [1, 2, 3]

        leader = _registration(cluster, "kafka-moved").leader
        preferred = next(n for n in (1, 2, 3) if n != leader)
        reordered = [preferred, *(n for n in (1, 2, 3) if n != preferred)]
        assert admin.alter_partition_reassignments({tp: reordered}) == {tp: None}
        assert _registration(cluster, "kafka-moved").leader == leader
        admin.elect_leaders(0, {"kafka-moved": [0]})  # preferred
        assert _registration(cluster, "kafka-moved").leader == preferred

        def log_dirs() -> dict:
            # One answer per broker: each storage node is a broker answering for itself.
            described = admin.describe_log_dirs({"kafka-moved": [0]})
            return {d["log_dir"]: d for answer in described for d in answer["log_dirs"]}

        # Node 4 sets its cancelled replica aside when it applies the cancel, which its
        # metadata applier does on its own time (under load, after this point).
        assert wait_until(lambda: log_dirs()["node-4"]["topics"] == []), log_dirs()["node-4"]
        dirs = log_dirs()
        assert sorted(dirs) == ["node-1", "node-2", "node-3", "node-4"]
        for node in (1, 2, 3):
            [topic] = dirs[f"node-{node}"]["topics"]
            assert topic["partitions"][0]["partition_size"] > 300 * 1000
    finally:
        admin.close()
