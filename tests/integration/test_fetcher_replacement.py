"""A follower's fetcher for a leader is replaced when the leader's address changes (a node
restarted on a new port, its bulk listener came or went). Every partition followed from that
leader must move to the new fetcher: partitions whose term did not change get no later state
that would re-add them, and stayed unfetched, out of the ISR, until the follower restarted
(issue 26: a fault campaign's replica stuck at one offset for ten minutes)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.storage_node.partition import Registration
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_until

FAST = {
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "replica.lag.time.max.ms": "1000",
}
TOPIC = "refetched"
PARTITIONS = 4  # three nodes, four partitions: some node leads two of them


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path, nodes=3, node_configs=FAST)
    yield c
    c.close()


def _registry(cluster: LocalCluster):  # type: ignore[no-untyped-def]
    assert cluster.gateway is not None
    return cluster.gateway.registry


def _two_partitions_of_one_leader(cluster: LocalCluster) -> tuple[int, int, int]:
    """(leader, a partition it leads, another partition it leads)."""
    led: dict[int, list[int]] = collections.defaultdict(list)
    for number, p in enumerate(_registry(cluster).topic(TOPIC).partitions):
        led[p.leader].append(number)
    leader, numbers = next((n, found) for n, found in led.items() if len(found) >= 2)
    return leader, numbers[0], numbers[1]


def _log_end(cluster: LocalCluster, node_id: int, partition: int) -> int:
    return int(cluster.nodes[node_id].logs.get_log(TOPIC, partition).log_end_offset)


def test_partitions_followed_from_a_leader_survive_its_fetcher_being_replaced(
    cluster: LocalCluster,
) -> None:
    cluster.admin.create_topic(TOPIC, PARTITIONS, 3)
    leader, moved, untouched = _two_partitions_of_one_leader(cluster)
    follower = next(n for n in cluster.nodes if n != leader)
    manager = cluster.nodes[follower].replicas
    fetchers = manager.follower_fetchers.by_leader
    assert wait_until(lambda: leader in fetchers, timeout_s=15)
    assert fetchers[leader].bulk_address, "the cluster should use the bulk path"

    # A new term for one partition arrives while the leader's bulk address reads differently:
    # the follower replaces its fetcher for that leader. A heartbeat answer may restore the
    # bulk address between the two steps, so the trigger is repeated (a bounded number of
    # times) until the replacement is seen.
    registry_state = _registry(cluster).topic(TOPIC).partitions[moved]
    epoch = registry_state.leader_epoch
    for _ in range(20):
        epoch += 1
        manager.node_bulk_addresses[leader] = ""
        manager.apply_state(
            TOPIC,
            moved,
            manager.topic_configs(TOPIC),
            Registration(
                leader,
                epoch,
                registry_state.partition_epoch + epoch,
                tuple(registry_state.replicas),
                tuple(registry_state.isr),
            ),
        )
        if fetchers[leader].bulk_address == "":
            break
    assert fetchers[leader].bulk_address == "", "the fetcher was never replaced"

    cluster.client.produce(TOPIC, {untouched: make_batch([b"a", b"b", b"c"])}, acks=1)
    leader_end = _log_end(cluster, leader, untouched)
    assert leader_end >= 3
    assert wait_until(lambda: _log_end(cluster, follower, untouched) >= leader_end, timeout_s=15), (
        f"{TOPIC}-{untouched} on node {follower} stays at "
        f"{_log_end(cluster, follower, untouched)} while its leader {leader} is at {leader_end}"
    )
