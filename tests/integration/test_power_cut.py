"""A replica that loses its unflushed writes (a power cut) repairs itself from its peers.

Each storage node's data dir is its own loop-mounted ext4. After 1,500 records are
acknowledged with acks=all (RF 3, min ISR 2), a replica is SIGKILLed and its filesystem is
stopped without flushing page cache or journal (EXT4_IOC_SHUTDOWN, NOLOGFLUSH), unmounted and
mounted again: what the node had not fsynced is gone, as after a power cut. seglog does not
fsync each append (replicas carry durability, as in Kafka), so the node comes back missing
acknowledged records; tests/replica_repair.py checks it is not trusted with them until it has
fetched them again, and ends byte-identical to the leader.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.faults.cluster import Cluster
from tests.replica_repair import create_topic, harm_and_repair, log_files
from tests.small_filesystem import cut_power, mounted_ext4, sync_filesystem

NODE_FILESYSTEM_BYTES = 32 * 1024 * 1024


@pytest.fixture
def cluster_on_own_disks(tmp_path):
    with contextlib.ExitStack() as mounts:
        for node_id in (1, 2, 3):
            mounts.enter_context(
                mounted_ext4(
                    tmp_path / f"node-{node_id}.img",
                    tmp_path / f"node-{node_id}",
                    NODE_FILESYSTEM_BYTES,
                )
            )
        cluster = Cluster(tmp_path)
        try:
            create_topic(cluster)
            yield cluster
        finally:
            cluster.close()


# One case in make test (the leader, the one that must not serve what it lost); the other
# three, each a power cut of its own (~13 s), are make test-long's.
LONG = pytest.mark.long


@pytest.mark.slow
@pytest.mark.parametrize(
    ("synced_midway", "victim_is_leader"),
    [
        pytest.param(False, False, id="nothing-synced-follower", marks=LONG),
        pytest.param(False, True, id="nothing-synced-leader"),
        pytest.param(True, False, id="half-synced-follower", marks=LONG),
        pytest.param(True, True, id="half-synced-leader", marks=LONG),
    ],
)
def test_a_replica_that_lost_its_page_cache_fetches_what_it_lost(
    cluster_on_own_disks, victim_is_leader, synced_midway
):
    """Nothing synced: the node comes back with whatever ext4 happened to write back (often
    no log at all). Half synced (syncfs after the first 750 records): it comes back with at
    least those, a log cut somewhere after them and checkpoints of another moment, and
    recovers before it repairs."""
    cluster = cluster_on_own_disks
    sizes: dict[str, int] = {}
    synced_sizes: dict[int, int] = {}

    def sync_all() -> None:
        for node_id in (1, 2, 3):
            sync_filesystem(cluster.root / f"node-{node_id}")
            synced_sizes[node_id] = sum(p.stat().st_size for p in log_files(cluster, node_id))

    def power_cut(node_id: int) -> None:
        sizes["before"] = sum(p.stat().st_size for p in log_files(cluster, node_id))
        cut_power(cluster.root / f"node-{node_id}.img", cluster.root / f"node-{node_id}")
        sizes["after"] = sum(p.stat().st_size for p in log_files(cluster, node_id))

    victim = harm_and_repair(
        cluster,
        victim_is_leader=victim_is_leader,
        harm=power_cut,
        midway=sync_all if synced_midway else None,
    )
    # The fault was real: the replica came back with less than it had acknowledged, and
    # with everything the sync made durable.
    assert sizes["after"] < sizes["before"], sizes
    if synced_midway:
        assert sizes["after"] >= synced_sizes[victim] > 0, (sizes, synced_sizes)
