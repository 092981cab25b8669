"""A partition whose follower copy diverged from its leader inside a batch neither stalls the
other partitions the follower copies from that leader nor stays diverged.

Three storage nodes and a gateway, each a process (RF 3, min ISR 2). A follower is
SIGKILLed and its copy of one partition is given another last batch in the same leader
epoch, ending inside the leader's last batch: epochs cannot show the difference, and the
leader's answer for that partition starts below the follower's log end. The follower must
catch up every other partition of that leader, and cut its diverged copy back to the
leader's batch and fetch it again (follower_truncation.cut_at_leader_batch), so it holds
the leader's records, not its own, and rejoins that partition's ISR too. Before that cut,
such a follower refused the same answer forever, and its ISR never grew back (found by the
Streams fault campaign).
"""

from __future__ import annotations

from collections import Counter

import pytest

from seglog.storage import Log
from tests.batches import make_batch
from tests.faults.cluster import TOPIC, Cluster
from tests.replica_repair import REPAIR_TIMEOUT_S
from tests.waiting import wait_for

PARTITIONS = 4  # three nodes: two partitions at least share a leader
BATCHES = 20
RECORDS_PER_BATCH = 2


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        cluster.admin.create_topic(TOPIC, PARTITIONS, 3)
        wait_for(cluster.healed, REPAIR_TIMEOUT_S, "the topic's replicas in sync", cluster.state)
        yield cluster
    finally:
        cluster.close()


def produce(cluster: Cluster, partition: int, batches: int) -> None:
    for n in range(batches):
        batch = make_batch([b"p%d-%d-%d" % (partition, n, i) for i in range(RECORDS_PER_BATCH)])
        [result] = cluster.client.produce(TOPIC, {partition: batch}, acks=-1, timeout_ms=10_000)
        assert not result.error, result


def partitions_by_number(cluster: Cluster) -> dict[int, object]:
    return {p.partition: p for p in cluster.topic().partitions}


def end_of(partition: object, node_id: int) -> int:
    return int(next(r.log_end_offset for r in partition.replica_states if r.node_id == node_id))


@pytest.mark.slow
def test_a_diverged_partition_stalls_no_other_and_is_cut_back_to_its_leaders_batches(cluster):
    leaders = Counter(p.leader for p in cluster.topic().partitions)
    leader = next(node for node, count in leaders.items() if count >= 2)
    same_leader = sorted(p.partition for p in cluster.topic().partitions if p.leader == leader)
    broken, healthy = same_leader[0], same_leader[1:]
    follower = next(n for n in sorted(cluster.nodes) if n != leader)
    for partition in same_leader:
        produce(cluster, partition, BATCHES)
    wait_for(cluster.caught_up, REPAIR_TIMEOUT_S, "every replica at the log end", cluster.state)
    epoch = partitions_by_number(cluster)[broken].leader_epoch

    cluster.nodes[follower].kill()
    end = BATCHES * RECORDS_PER_BATCH
    log = Log.open(cluster.root / f"node-{follower}" / f"{TOPIC}-{broken}")
    log.truncate_to(end - 2 * RECORDS_PER_BATCH)
    # Three records where the leader holds two batches of two, in the same epoch: the
    # follower's log end (end - 1) falls inside the leader's last batch.
    log.append(make_batch([b"other-0", b"other-1", b"other-2"]), leader_epoch=epoch)
    assert log.log_end_offset == end - 1
    log.close()
    cluster.nodes[follower].start()

    for partition in healthy:
        produce(cluster, partition, BATCHES)

    def healthy_caught_up() -> bool:
        states = partitions_by_number(cluster)
        return all(
            follower in states[p].isr and end_of(states[p], follower) == 2 * end for p in healthy
        )

    wait_for(healthy_caught_up, REPAIR_TIMEOUT_S, "the healthy partitions caught up", cluster.state)

    def repaired() -> bool:
        state = partitions_by_number(cluster)[broken]
        return follower in state.isr and end_of(state, follower) == end

    wait_for(repaired, REPAIR_TIMEOUT_S, "the diverged copy cut back and caught up", cluster.state)
    stderr = (cluster.root / "logs" / f"node-{follower}.log").read_text()
    assert f"{TOPIC}-{broken}: the leader's batch" in stderr and "diverged inside it" in stderr
    cluster.nodes[follower].kill()
    log = Log.open(cluster.root / f"node-{follower}" / f"{TOPIC}-{broken}")
    try:
        held = log.read(end - 2 * RECORDS_PER_BATCH, 1 << 20)
    finally:
        log.close()
    assert b"other-0" not in bytes(held) and b"p%d-%d-0" % (broken, BATCHES - 1) in bytes(held)
