"""The last replica standing loses its page cache, and is not elected (Kafka's KIP-966).

The fault campaign's loss (seed 1795600865), made deterministic on real processes and real
disks: RF 3, min ISR 2, 1,500 records acknowledged with acks=all. One follower stops (its
session lapses, the ISR is still at min ISR), then the other (the ISR falls below min ISR:
that one joins the eligible leader replicas, holding every committed record). The leader,
now alone in the ISR, is SIGKILLed and its disk's power cut: it comes back with its log cut
short and registers saying its shutdown was unclean. Before the fix it was elected as the
last ISR member and the other two truncated the acknowledged records away; now it is not,
the partition stays offline until the ELR member returns, which leads, and every
acknowledged record is read back."""

from __future__ import annotations

import os
import signal

import pytest

from seglog.errors import SeglogError
from tests.faults.cluster import Cluster
from tests.replica_repair import (
    RECORDS,
    REPAIR_TIMEOUT_S,
    create_topic,
    log_files,
    partition_state,
    produce,
    read_all,
    value_of,
)
from tests.waiting import wait_for


@pytest.fixture
def cluster(tmp_path):
    # No preferred-leader election: the replica elected after the outage keeps leading, so
    # the test sees who was elected however long its polls take.
    cluster = Cluster(tmp_path, node_disks=True, leader_imbalance_check_interval_s=3600)
    try:
        create_topic(cluster)
        yield cluster
    finally:
        for node in cluster.nodes.values():
            if node.alive():
                os.kill(node.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM
        cluster.close()


def _registration(cluster: Cluster) -> tuple[int, list[int], list[int]] | None:
    """Leader, ISR and ELR; None while a describe times out on a stopped node not yet
    counted down."""
    try:
        p = partition_state(cluster)
    except SeglogError:
        return None
    return p.leader, list(p.isr), list(p.eligible_leader_replicas)


@pytest.mark.slow
def test_the_last_in_sync_replica_back_from_a_power_cut_is_not_elected(cluster):
    acknowledged = produce(cluster, 0, RECORDS)
    wait_for(cluster.caught_up, REPAIR_TIMEOUT_S, "every replica at the log end", cluster.state)
    survivor = partition_state(cluster).leader
    replicas = list(partition_state(cluster).replicas)
    first_out, vouched = [n for n in replicas if n != survivor]

    os.kill(cluster.nodes[first_out].pid, signal.SIGSTOP)
    in_sync = [n for n in replicas if n != first_out]
    wait_for(
        lambda: _registration(cluster) == (survivor, in_sync, []),
        REPAIR_TIMEOUT_S,
        "the first follower out of the ISR, which stays at min ISR",
        cluster.state,
    )
    os.kill(cluster.nodes[vouched].pid, signal.SIGSTOP)
    wait_for(
        lambda: _registration(cluster) == (survivor, [survivor], [vouched]),
        REPAIR_TIMEOUT_S,
        "the second follower out of the ISR, into the ELR",
        cluster.state,
    )

    before_bytes = sum(path.stat().st_size for path in log_files(cluster, survivor))
    cluster.nodes[survivor].kill()
    cluster.disks.cut_power(survivor)
    after_bytes = sum(path.stat().st_size for path in log_files(cluster, survivor))
    assert after_bytes < before_bytes, (before_bytes, after_bytes)  # the fault was real
    wait_for(
        lambda: _registration(cluster) == (-1, [survivor], [vouched]),
        REPAIR_TIMEOUT_S,
        "the survivor fenced, no one eligible to lead",
        cluster.state,
    )
    cluster.nodes[survivor].start()
    wait_for(
        lambda: cluster.live(survivor),
        REPAIR_TIMEOUT_S,
        "the survivor registered again",
        cluster.state,
    )
    # Offline rather than led by a log cut short: the ELR member is the ISR to elect from.
    assert _registration(cluster) == (-1, [vouched], [])

    os.kill(cluster.nodes[vouched].pid, signal.SIGCONT)
    os.kill(cluster.nodes[first_out].pid, signal.SIGCONT)
    wait_for(
        lambda: (_registration(cluster) or (None,))[0] == vouched,
        REPAIR_TIMEOUT_S,
        "the replica holding the committed records leads",
        cluster.state,
    )
    read = read_all(cluster, RECORDS)
    lost = [offset for offset, index in acknowledged.items() if read.get(offset) != value_of(index)]
    assert not lost, f"{len(lost)} acknowledged records lost, first at offset {lost[0]}"
    wait_for(cluster.healed, REPAIR_TIMEOUT_S, "every replica back in the ISR", cluster.state)
    wait_for(cluster.caught_up, REPAIR_TIMEOUT_S, "every replica at the log end", cluster.state)
