"""A replica whose files were damaged while it was down repairs itself from its peers.

Three storage nodes and a gateway, each a process (tests/faults/cluster.py's Cluster: RF 3,
min ISR 2). 1,500 records are acknowledged with acks=all; a replica is SIGKILLed and one bit
of a batch's baseOffset (outside the CRC) is flipped in an older segment of its copy; it is
restarted. Recovery must cut its log before the damage (and say so), the node must fetch the
rest from the leader as a follower, stay out of the ISR until it has every acknowledged
record, and end byte-identical to the leader, while the partition keeps taking produces.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from seglog.client.gateway import FetchPosition
from seglog.records import iter_records
from tests.cluster import batch
from tests.faults.cluster import TOPIC, Cluster, wait_for

RECORDS = 1500
RECORDS_PER_BATCH = 10
SEGMENT_BYTES = 4096
REPAIR_TIMEOUT_S = 60.0
BASE_OFFSET_BIT = 60


def value_of(index: int) -> bytes:
    return b"record-%05d-" % index + b"x" * 20


def produce(cluster: Cluster, first: int, count: int) -> dict[int, int]:
    """acks=all batches of RECORDS_PER_BATCH records; {offset: record index} acknowledged."""
    acknowledged: dict[int, int] = {}
    for start in range(first, first + count, RECORDS_PER_BATCH):
        indexes = range(start, min(start + RECORDS_PER_BATCH, first + count))
        deadline = time.monotonic() + REPAIR_TIMEOUT_S
        while True:
            [result] = cluster.client.produce(
                TOPIC, {0: batch([value_of(i) for i in indexes])}, acks=-1, timeout_ms=5000
            )
            if result.error == 0:
                break
            assert time.monotonic() < deadline, f"produce kept failing: {result}"
            time.sleep(0.1)  # a retriable answer while leadership moves: back off and retry
        for delta, index in enumerate(indexes):
            acknowledged[result.base_offset + delta] = index
    return acknowledged


def read_all(cluster: Cluster, end: int) -> dict[int, bytes]:
    records: dict[int, bytes] = {}
    offset = 0
    deadline = time.monotonic() + REPAIR_TIMEOUT_S
    while offset < end and time.monotonic() < deadline:
        for response in cluster.client.fetch([FetchPosition(TOPIC, 0, offset)], max_wait_ms=200):
            for record in iter_records(response.records):
                records[record.offset] = record.value
                offset = max(offset, record.offset + 1)
    return records


def partition_state(cluster: Cluster):
    [partition] = cluster.topic().partitions
    return partition


def replica_end(partition, node_id: int) -> int:
    return next(r.log_end_offset for r in partition.replica_states if r.node_id == node_id)


def log_files(cluster: Cluster, node_id: int) -> list[Path]:
    return sorted((cluster.root / f"node-{node_id}" / f"{TOPIC}-0").glob("*.log"))


def log_bytes(cluster: Cluster, node_id: int) -> bytes:
    return b"".join(path.read_bytes() for path in log_files(cluster, node_id))


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
        cluster.client.create_topic(TOPIC, 1, 3, {"segment.bytes": str(SEGMENT_BYTES)})
        wait_for(cluster.healed, REPAIR_TIMEOUT_S, "the topic's replicas in sync", cluster.state)
        yield cluster
    finally:
        cluster.close()


def damage_and_repair(cluster: Cluster, *, victim_is_leader: bool) -> None:
    acknowledged = produce(cluster, 0, RECORDS)
    assert sorted(acknowledged) == list(range(RECORDS))
    wait_for(cluster.caught_up, REPAIR_TIMEOUT_S, "every replica at the log end", cluster.state)
    leader = partition_state(cluster).leader
    victim = leader if victim_is_leader else next(n for n in cluster.nodes if n != leader)

    cluster.nodes[victim].kill()
    damaged_offset = flip_base_offset_in_an_older_segment(cluster, victim)
    fenced_epoch = partition_state(cluster).partition_epoch
    if victim_is_leader:
        # Another replica, one that has every acknowledged record, takes over; the old
        # leader leaves the ISR in the same change.
        wait_for(
            lambda: partition_state(cluster).leader not in (victim, -1),
            REPAIR_TIMEOUT_S,
            "a new leader",
            cluster.state,
        )
        fenced_epoch = partition_state(cluster).partition_epoch
    cluster.nodes[victim].start()

    # Once the restarted replica was fenced (its registration takes it out of the ISR, which
    # bumps the partition epoch), it may be in the ISR or lead only with every acknowledged
    # record. A describe reads the ISR before it asks the node for its log end, and the log
    # end only grows after the cut, so a log end below RECORDS seen with the replica in a
    # later ISR is a replica admitted before it caught up.
    deadline = time.monotonic() + REPAIR_TIMEOUT_S
    while time.monotonic() < deadline:
        partition = partition_state(cluster)
        if partition.partition_epoch > fenced_epoch and victim in partition.isr:
            end = replica_end(partition, victim)
            assert end >= RECORDS, f"node {victim} in the ISR with log end {end}: {partition}"
        if partition.leader == victim:
            assert replica_end(partition, victim) >= RECORDS, f"damaged leader: {partition}"
        if cluster.caught_up() and cluster.healed():
            break
        time.sleep(0.02)
    assert cluster.caught_up() and cluster.healed(), cluster.state()

    stderr = (cluster.root / "logs" / f"node-{victim}.log").read_text()
    [line] = [line for line in stderr.splitlines() if "corrupt data" in line]
    assert f"baseOffset {(1 << BASE_OFFSET_BIT) + damaged_offset}" in line
    assert f"the log now ends at offset {damaged_offset}" in line

    # The partition keeps taking produces, with the right offsets.
    more = produce(cluster, RECORDS, 100)
    assert sorted(more) == list(range(RECORDS, RECORDS + 100))
    acknowledged.update(more)
    wait_for(cluster.caught_up, REPAIR_TIMEOUT_S, "every replica at the log end", cluster.state)
    leader = partition_state(cluster).leader
    assert log_bytes(cluster, victim) == log_bytes(cluster, leader)
    records = read_all(cluster, RECORDS + 100)
    assert {o: records.get(o) for o in acknowledged} == {
        o: value_of(i) for o, i in acknowledged.items()
    }


def test_a_follower_with_a_damaged_segment_repairs_from_the_leader(cluster):
    damage_and_repair(cluster, victim_is_leader=False)


def test_a_damaged_leader_comes_back_as_a_follower_and_repairs(cluster):
    damage_and_repair(cluster, victim_is_leader=True)
