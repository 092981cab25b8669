"""A replica whose files were damaged while it was down repairs itself from its peers.

Three storage nodes and a gateway, each a process (RF 3, min ISR 2). 1,500 records are
acknowledged with acks=all; a replica is SIGKILLed and one bit of a batch's baseOffset
(outside the CRC) is flipped in an older segment of its copy; it is restarted. Recovery must
cut its log before the damage and say so, and tests/replica_repair.py checks the rest: a
follower again, out of the ISR until caught up, byte-identical to the leader in the end.
"""

from __future__ import annotations

import struct

import pytest

from tests.faults.cluster import Cluster
from tests.replica_repair import create_topic, harm_and_repair, log_files

BASE_OFFSET_BIT = 60


def flip_base_offset_in_an_older_segment(cluster: Cluster, node_id: int) -> int:
    """Flip bit 60 of the second batch's baseOffset in the second segment; return the offset
    that batch held (the log must end there after recovery)."""
    paths = log_files(cluster, node_id)
    assert len(paths) >= 4, f"expected several segments, found {paths}"
    path = paths[1]
    raw = bytearray(path.read_bytes())
    second = 12 + struct.unpack_from(">i", raw, 8)[0]
    original = struct.unpack_from(">q", raw, second)[0]
    raw[second + 7 - BASE_OFFSET_BIT // 8] ^= 1 << (BASE_OFFSET_BIT % 8)
    path.write_bytes(bytes(raw))
    return original


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        create_topic(cluster)
        yield cluster
    finally:
        cluster.close()


@pytest.mark.slow
@pytest.mark.parametrize("victim_is_leader", [False, True], ids=["follower", "leader"])
def test_a_replica_with_a_damaged_segment_cuts_it_and_repairs_from_the_leader(
    cluster, victim_is_leader
):
    damaged: list[int] = []
    victim = harm_and_repair(
        cluster,
        victim_is_leader=victim_is_leader,
        harm=lambda node_id: damaged.append(flip_base_offset_in_an_older_segment(cluster, node_id)),
    )
    stderr = (cluster.root / "logs" / f"node-{victim}.log").read_text()
    [line] = [line for line in stderr.splitlines() if "corrupt data" in line]
    assert f"baseOffset {(1 << BASE_OFFSET_BIT) + damaged[0]}" in line
    assert f"the log now ends at offset {damaged[0]}" in line
