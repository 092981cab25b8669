"""Replication with Kafka's protocol on a real three-node cluster (in-process gRPC servers on
loopback): followers copying byte for byte, the ISR and high watermark, acks=all, leader
failover without losing acknowledged records, divergent logs truncated (KIP-101), and the
errors that write nothing."""

from __future__ import annotations

import threading

import grpc
import pytest

from seglog.client.gateway import FetchPosition
from seglog.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotEnoughReplicasError,
    NotLeaderError,
    UnknownLeaderEpochError,
)
from seglog.rpc.status import error_from_code
from seglog.storage.checkpoint import HIGH_WATERMARK_CHECKPOINT, read_checkpoint
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until

FAST = {
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "replica.lag.time.max.ms": "1000",
}


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(
        tmp_path,
        nodes=3,
        node_configs=FAST,
        auto_leader_rebalance_enable=True,
        leader_imbalance_check_interval_seconds=1,
    )
    yield c
    c.close()


def _produce(cluster, topic, values, *, acks=-1, partition=0, timeout_ms=10_000):
    [result] = cluster.client.produce(
        topic, {partition: make_batch(values)}, acks=acks, timeout_ms=timeout_ms
    )
    return result


def _produced(cluster, topic, values) -> bool:
    """Accepted with acks=all; False while the leadership just elected is not yet applied by
    its node (the gateway's routing may run ahead of the node's push)."""
    try:
        return _produce(cluster, topic, values).error == 0
    except (NotLeaderError, LeaderNotAvailableError):  # refused before anything was written
        return False


def _registration(cluster, topic, partition=0):
    return cluster.gateway.registry.topic(topic).partitions[partition]


def _replica_logs(cluster, topic, partition=0):
    p = _registration(cluster, topic, partition)
    return {
        n: cluster.nodes[n].logs.get_log(topic, partition) for n in p.replicas if n in cluster.nodes
    }


def _caught_up(cluster, topic, partition=0):
    logs = _replica_logs(cluster, topic, partition)
    ends = {log.log_end_offset for log in logs.values()}
    hws = {log.high_watermark for log in logs.values()}
    return len(ends) == 1 and hws == ends


def _segment_bytes(log):
    return {path.name: path.read_bytes() for path in sorted(log.directory.glob("*.log"))}


def _isr(cluster, topic, partition=0):
    return sorted(_registration(cluster, topic, partition).isr)


def test_followers_end_with_the_leaders_segment_files_byte_for_byte(cluster):
    cluster.admin.create_topic("copied", 1, 3, configs={"segment.bytes": "2048"})
    p = _registration(cluster, "copied")
    leader_bulk = cluster.nodes[p.leader].bulk
    replica_answers = []
    real_check = leader_bulk._check

    def check(request, *peer):
        wanted, replica_id, relayed = real_check(request, *peer)
        replica_answers.append(replica_id)
        return wanted, replica_id, relayed

    leader_bulk._check = check  # followers copy through the leader's bulk listener
    assert sorted(p.replicas) == [1, 2, 3] and len(set(p.replicas)) == 3
    for i in range(40):
        result = _produce(cluster, "copied", [b"value-%d" % i * 10, b"second"])
        assert result.error == 0 and result.base_offset == 2 * i
    assert wait_until(lambda: _caught_up(cluster, "copied"))
    logs = _replica_logs(cluster, "copied")
    leader_files = _segment_bytes(logs[p.leader])
    assert len(leader_files) > 3  # several segments, rolled at the same offsets everywhere
    for node_id, log in logs.items():
        assert _segment_bytes(log) == leader_files, f"node {node_id} differs"
        assert log.leader_epochs.entries == logs[p.leader].leader_epochs.entries
    assert {r for r in replica_answers if r >= 0} == set(p.replicas) - {p.leader}


def test_consumers_read_only_below_the_high_watermark(cluster):
    cluster.admin.create_topic("hw", 1, 3)
    assert _produce(cluster, "hw", [b"committed"]).error == 0
    assert wait_until(lambda: _caught_up(cluster, "hw"))
    p = _registration(cluster, "hw")
    followers = [n for n in p.replicas if n != p.leader]
    for node_id in followers:
        cluster.stop_node(node_id, controlled=False)
    # acks=1: on the leader only; the ISR still names the followers (lag not yet passed)
    result = _produce(cluster, "hw", [b"not yet replicated"], acks=1)
    assert result.error == 0 and result.base_offset == 1
    leader_log = cluster.nodes[p.leader].logs.get_log("hw", 0)
    assert (leader_log.log_end_offset, leader_log.high_watermark) == (2, 1)
    assert (
        cluster.client.list_offsets("hw", {0: -1})[0].offset == 1
    )  # ListOffsets(latest) answers the high watermark
    fetched = list(cluster.client.fetch([FetchPosition("hw", 0, 0)], max_wait_ms=0))
    assert [r.value for r in _records(fetched)] == [b"committed"]
    assert all(m.high_watermark == 1 for m in fetched)


def _records(messages):
    from seglog.records.batch import RecordBatch

    out = []
    for message in messages:
        view, pos = memoryview(message.records), 0
        while pos < len(view):
            record_batch = RecordBatch(view[pos:])
            out.extend(record_batch.records())
            pos += record_batch.size_in_bytes
    return out


def test_acks_all_below_min_insync_replicas_is_refused_and_writes_nothing(cluster):
    cluster.admin.create_topic("strict", 1, 3, configs={"min.insync.replicas": "2"})
    assert _produce(cluster, "strict", [b"a"]).error == 0
    p = _registration(cluster, "strict")
    followers = [n for n in p.replicas if n != p.leader]
    cluster.stop_node(followers[0], controlled=False)
    # One follower gone: the ISR shrinks to two, still enough.
    assert wait_until(lambda: len(_isr(cluster, "strict")) == 2)
    assert _produce(cluster, "strict", [b"b"]).error == 0
    cluster.stop_node(followers[1], controlled=False)
    assert wait_until(lambda: _isr(cluster, "strict") == [p.leader])
    # The leader judges acks=all by the ISR it has applied, which follows the registry's.
    held = cluster.nodes[p.leader].replicas.partition("strict", 0)
    assert wait_until(lambda: held.isr == (p.leader,))
    leader_log = cluster.nodes[p.leader].logs.get_log("strict", 0)
    end_before = leader_log.log_end_offset
    result = _produce(cluster, "strict", [b"c"])
    error = error_from_code(result.error, result.error_message)
    assert isinstance(error, NotEnoughReplicasError) and error.retriable
    assert "min.insync.replicas is 2" in result.error_message
    assert leader_log.log_end_offset == end_before  # nothing written
    # acks=1 is still taken, but the high watermark waits for a second in-sync replica.
    assert _produce(cluster, "strict", [b"d"], acks=1).error == 0
    assert leader_log.high_watermark == end_before
    # A follower comes back, catches up, rejoins: the high watermark covers everything.
    cluster.start_node(followers[0])
    assert wait_until(lambda: len(_isr(cluster, "strict")) == 2)
    assert wait_until(lambda: leader_log.high_watermark == leader_log.log_end_offset)
    assert _produce(cluster, "strict", [b"e"]).error == 0


def test_acks_all_times_out_when_the_isr_does_not_copy_in_time(tmp_path):
    # A long replica.lag.time.max.ms keeps dead followers in the ISR: acks=all cannot finish.
    cluster = LocalCluster(
        tmp_path, nodes=3, node_configs={**FAST, "replica.lag.time.max.ms": "60000"}
    )
    try:
        cluster.admin.create_topic("slow", 1, 3)
        assert wait_until(lambda: _caught_up(cluster, "slow"))
        p = _registration(cluster, "slow")
        for node_id in p.replicas:
            if node_id != p.leader:
                cluster.stop_node(node_id, controlled=False)
        result = _produce(cluster, "slow", [b"x"], timeout_ms=300)
        assert common_pb2.ErrorCode.Name(result.error) == "REQUEST_TIMED_OUT"
    finally:
        cluster.close()


def test_a_follower_fetch_with_a_stale_leader_epoch_is_fenced(cluster):
    cluster.admin.create_topic("fenced", 1, 3)
    cluster.stop_node(_registration(cluster, "fenced").leader)  # a new term: epoch >= 1
    p = _registration(cluster, "fenced")
    follower = next(n for n in p.replicas if n != p.leader and n in cluster.nodes)
    leader = cluster.nodes[p.leader]
    for epoch, expected in (
        (p.leader_epoch - 1, FencedLeaderEpochError),
        (p.leader_epoch + 1, UnknownLeaderEpochError),
    ):
        request = common_pb2.FetchRequest(replica_id=follower, max_wait_ms=0, max_bytes=1 << 20)
        request.partitions.add(
            topic="fenced",
            partition=0,
            fetch_offset=0,
            partition_max_bytes=1 << 20,
            current_leader_epoch=epoch,
        )
        with grpc.insecure_channel(leader.address) as channel:
            fetch = channel.unary_stream(
                "/seglog.v1.StorageNode/Fetch",
                request_serializer=common_pb2.FetchRequest.SerializeToString,
                response_deserializer=common_pb2.FetchResponse.FromString,
            )
            [answer] = list(fetch(request, timeout=10))
        assert isinstance(error_from_code(answer.error, answer.error_message), expected)
        assert not answer.records


def test_a_dead_leader_is_replaced_by_an_isr_follower_and_no_acknowledged_record_is_lost(
    cluster,
):
    cluster.admin.create_topic("failover", 1, 3, configs={"min.insync.replicas": "2"})
    acknowledged = []
    for i in range(30):
        result = _produce(cluster, "failover", [b"before-%d" % i])
        assert result.error == 0
        acknowledged.append(b"before-%d" % i)
    p = _registration(cluster, "failover")
    old_leader, old_epoch = p.leader, p.leader_epoch
    cluster.stop_node(old_leader, controlled=False)
    assert wait_until(lambda: _registration(cluster, "failover").leader not in (old_leader, -1))
    p = _registration(cluster, "failover")
    assert p.leader_epoch > old_epoch and old_leader not in p.isr
    for i in range(30):
        value = b"after-%d" % i
        assert wait_until(lambda v=value: _produced(cluster, "failover", [v]), 10)
        acknowledged.append(value)
    fetched = cluster.client.fetch([FetchPosition("failover", 0, 0)], max_wait_ms=0)
    values = [r.value for r in _records(fetched)]
    assert values[: len(acknowledged)] == acknowledged  # nothing lost, in order
    # The old leader returns as a follower, catches up, rejoins, and leads again as the
    # preferred replica.
    cluster.start_node(old_leader)
    assert wait_until(lambda: _registration(cluster, "failover").leader == old_leader, 20)
    assert wait_until(lambda: _caught_up(cluster, "failover"))
    logs = _replica_logs(cluster, "failover")
    assert len({tuple(_segment_bytes(log).items()) for log in logs.values()}) == 1


def test_a_leader_that_wrote_what_it_never_replicated_truncates_to_the_new_leader(cluster):
    cluster.admin.create_topic("diverge", 1, 2)
    assert _produce(cluster, "diverge", [b"shared"]).error == 0
    assert wait_until(lambda: _caught_up(cluster, "diverge"))
    p = _registration(cluster, "diverge")
    old_leader = p.leader
    follower = next(n for n in p.replicas if n != old_leader)
    # The leader stops answering its follower (a network fault between them), appends with
    # acks=1 records nobody else has, then dies.
    leader_node = cluster.nodes[old_leader]
    real_follower_fetch = leader_node.replicas.fetches._follower_fetch
    refused = []

    def refuse(held, state, *args):
        refused.append(state.offset)
        raise grpc.RpcError("dropped")

    leader_node.replicas.fetches._follower_fetch = refuse
    # Once a fetch is refused, the follower's long poll begun before has ended: nothing
    # appended from now on can reach it. (An idle fetch session evaluates only partitions
    # with news: the wake-up makes it evaluate this one now.)
    leader_node.replicas.wake_partition("diverge", 0)
    assert wait_until(lambda: refused)
    for value in (b"lost-1", b"lost-2", b"lost-3"):
        assert _produce(cluster, "diverge", [value], acks=1).error == 0
    assert leader_node.logs.get_log("diverge", 0).log_end_offset == 4
    leader_node.replicas.fetches._follower_fetch = real_follower_fetch
    cluster.stop_node(old_leader, controlled=False)
    assert wait_until(lambda: _registration(cluster, "diverge").leader == follower)
    for value in (b"new-1", b"new-2"):
        assert wait_until(lambda v=value: _produced(cluster, "diverge", [v]), 10)
    # The old leader returns: its last epoch ends earlier on the new leader, so it cuts its
    # divergent suffix and copies the new leader's records in its place.
    cluster.start_node(old_leader, **{"replica.lag.time.max.ms": "1000"})
    assert wait_until(lambda: _caught_up(cluster, "diverge"), 20)
    logs = _replica_logs(cluster, "diverge")
    values = [r.value for r in _records([_read_all(logs[old_leader])])]
    assert values == [b"shared", b"new-1", b"new-2"]
    assert _segment_bytes(logs[old_leader]) == _segment_bytes(logs[follower])


def test_an_acks_all_write_waiting_when_leadership_moves_answers_not_leader(cluster):
    cluster.admin.create_topic("moving", 1, 3)
    assert _produce(cluster, "moving", [b"first"]).error == 0
    p = _registration(cluster, "moving")
    leader_node = cluster.nodes[p.leader]

    refused = set()

    def refuse(held, state, *args):
        refused.add(state.replica_id)
        raise grpc.RpcError("dropped")

    leader_node.replicas.fetches._follower_fetch = refuse  # nothing more replicates from it
    # Idle fetch sessions evaluate only partitions with news: a wake-up makes both evaluate.
    leader_node.replicas.wake_partition("moving", 0)
    assert wait_until(lambda: len(refused) == 2)  # both followers' earlier polls have ended
    answers = []
    writer = threading.Thread(
        target=lambda: answers.append(_produce(cluster, "moving", [b"stuck"], timeout_ms=20_000))
    )
    writer.start()
    assert wait_until(lambda: leader_node.logs.get_log("moving", 0).log_end_offset == 2)
    # The registry moves the leadership while the write waits for its followers: the old
    # leader's log will be truncated and refilled, so it must not answer success.
    cluster.gateway.registry.controlled_shutdown(p.leader)
    writer.join(timeout=20)
    [answer] = answers
    assert common_pb2.ErrorCode.Name(answer.error) == "NOT_LEADER_OR_FOLLOWER"


def _read_all(log):
    return common_pb2.FetchResponse(records=log.read(0, 1 << 20))


def test_controlled_shutdown_moves_leadership_before_the_node_stops(cluster):
    cluster.admin.create_topic("planned", 1, 3, configs={"min.insync.replicas": "2"})
    assert _produce(cluster, "planned", [b"a"]).error == 0
    assert wait_until(lambda: _caught_up(cluster, "planned"))
    leader = _registration(cluster, "planned").leader
    cluster.stop_node(leader)  # controlled: it returns once nothing is led there
    p = _registration(cluster, "planned")
    assert p.leader not in (leader, -1) and leader not in p.isr
    assert wait_until(lambda: _produced(cluster, "planned", [b"b"]), 5)


def test_high_watermarks_are_checkpointed_in_kafkas_file(cluster):
    cluster.admin.create_topic("checkpointed", 1, 3)
    assert _produce(cluster, "checkpointed", [b"a", b"b"]).error == 0
    assert wait_until(lambda: _caught_up(cluster, "checkpointed"))
    node = cluster.nodes[1]
    node.logs.checkpoint_high_watermarks()
    path = node.config.data_dir / HIGH_WATERMARK_CHECKPOINT
    assert read_checkpoint(path)[("checkpointed", 0)] == 2
