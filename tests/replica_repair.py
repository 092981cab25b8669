"""A replica harmed while it was down (its files damaged, or its unflushed writes lost) must
come back as a follower, fetch what it lacks from the leader, stay out of the ISR until it
holds every acknowledged record, and end byte-identical to the leader while the partition
keeps taking produces. Shared by the disk-fault tests on a cluster of processes
(tests/faults/cluster.py's Cluster: three nodes and a gateway, RF 3, min ISR 2)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seglog.client.gateway import FetchPosition
from seglog.errors import SeglogError
from seglog.records import iter_records
from tests.batches import make_batch
from tests.faults.cluster import TOPIC, Cluster
from tests.waiting import wait_for

RECORDS = 1500
MORE_RECORDS = 100
RECORDS_PER_BATCH = 10
SEGMENT_BYTES = 4096
REPAIR_TIMEOUT_S = 60.0


def value_of(index: int) -> bytes:
    return b"record-%05d-" % index + b"x" * 20


def create_topic(cluster: Cluster) -> None:
    cluster.admin.create_topic(TOPIC, 1, 3, {"segment.bytes": str(SEGMENT_BYTES)})
    wait_for(cluster.healed, REPAIR_TIMEOUT_S, "the topic's replicas in sync", cluster.state)


def produce(cluster: Cluster, first: int, count: int) -> dict[int, int]:
    """acks=all batches of RECORDS_PER_BATCH records; {offset: record index} acknowledged."""
    acknowledged: dict[int, int] = {}
    for start in range(first, first + count, RECORDS_PER_BATCH):
        indexes = range(start, min(start + RECORDS_PER_BATCH, first + count))
        deadline = time.monotonic() + REPAIR_TIMEOUT_S
        while True:
            try:
                [result] = cluster.client.produce(
                    TOPIC, {0: make_batch([value_of(i) for i in indexes])}, acks=-1, timeout_ms=5000
                )
                failure: object = result if result.error else None
            except SeglogError as exc:  # the gateway's route moved under the call
                if not exc.retriable:
                    raise
                failure = exc
            if failure is None:
                break
            assert time.monotonic() < deadline, f"produce kept failing: {failure}"
            time.sleep(0.1)  # a retriable answer while leadership moves: back off and retry
        for delta, index in enumerate(indexes):
            acknowledged[result.base_offset + delta] = index
    return acknowledged


def read_all(cluster: Cluster, end: int) -> dict[int, bytes]:
    records: dict[int, bytes] = {}
    offset = 0
    deadline = time.monotonic() + REPAIR_TIMEOUT_S
    while offset < end and time.monotonic() < deadline:
        try:
            for response in cluster.client.fetch(
                [FetchPosition(TOPIC, 0, offset)], max_wait_ms=200
            ):
                for record in iter_records(response.records):
                    records[record.offset] = record.value
                    offset = max(offset, record.offset + 1)
        except SeglogError as exc:  # leadership moved (the preferred replica is back)
            if not exc.retriable:
                raise
            time.sleep(0.1)
    return records


def partition_state(cluster: Cluster) -> Any:
    [partition] = cluster.topic().partitions
    return partition


def replica_end(partition: Any, node_id: int) -> int:
    return int(next(r.log_end_offset for r in partition.replica_states if r.node_id == node_id))


def partition_directory(cluster: Cluster, node_id: int) -> Path:
    return cluster.root / f"node-{node_id}" / f"{TOPIC}-0"


def log_files(cluster: Cluster, node_id: int) -> list[Path]:
    return sorted(partition_directory(cluster, node_id).glob("*.log"))


def log_bytes(cluster: Cluster, node_id: int) -> bytes:
    return b"".join(path.read_bytes() for path in log_files(cluster, node_id))


def harm_and_repair(
    cluster: Cluster,
    *,
    victim_is_leader: bool,
    harm: Callable[[int], None],
    midway: Callable[[], None] | None = None,
) -> int:
    """Produce RECORDS acks=all (calling `midway` after the first half), SIGKILL a replica
    (the leader or a follower), `harm(node_id)` while it is down, restart it, and check the
    repair; return the victim's node id."""
    acknowledged = produce(cluster, 0, RECORDS // 2)
    if midway is not None:
        midway()
    acknowledged.update(produce(cluster, RECORDS // 2, RECORDS - RECORDS // 2))
    assert sorted(acknowledged) == list(range(RECORDS)), _gaps(acknowledged, 0, RECORDS)
    leader = partition_state(cluster).leader
    victim = leader if victim_is_leader else next(n for n in cluster.nodes if n != leader)
    if not victim_is_leader:
        # A follower harmed while the ISR still counts on it: it holds every record.
        wait_for(cluster.caught_up, REPAIR_TIMEOUT_S, "every replica at the log end", cluster.state)

    cluster.nodes[victim].kill()
    harm(victim)
    fenced_epoch = partition_state(cluster).partition_epoch
    if victim_is_leader:
        # Another replica of the ISR, which has every acknowledged record, takes over; the
        # old leader leaves the ISR in the same change.
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
    # end only grows after the restart, so a log end below RECORDS seen with the replica in
    # a later ISR is a replica admitted before it caught up.
    deadline = time.monotonic() + REPAIR_TIMEOUT_S
    while time.monotonic() < deadline:
        partition = partition_state(cluster)
        if partition.partition_epoch > fenced_epoch and victim in partition.isr:
            end = replica_end(partition, victim)
            assert end >= RECORDS, f"node {victim} in the ISR with log end {end}: {partition}"
        if partition.leader == victim:
            assert replica_end(partition, victim) >= RECORDS, f"harmed leader: {partition}"
        if cluster.caught_up() and cluster.healed():
            break
        time.sleep(0.02)
    assert cluster.caught_up() and cluster.healed(), cluster.state()

    # The partition keeps taking produces, with the right offsets.
    more = produce(cluster, RECORDS, MORE_RECORDS)
    assert sorted(more) == list(range(RECORDS, RECORDS + MORE_RECORDS)), _gaps(
        more, RECORDS, RECORDS + MORE_RECORDS
    )
    acknowledged.update(more)
    wait_for(cluster.caught_up, REPAIR_TIMEOUT_S, "every replica at the log end", cluster.state)
    leader = partition_state(cluster).leader
    assert log_bytes(cluster, victim) == log_bytes(cluster, leader), _differences(
        cluster, victim, leader
    )
    records = read_all(cluster, RECORDS + MORE_RECORDS)
    wrong = {o: records.get(o) for o, i in acknowledged.items() if records.get(o) != value_of(i)}
    assert not wrong, f"{len(wrong)} acknowledged records lost or changed, e.g. {sorted(wrong)[:5]}"
    return victim


def _gaps(acknowledged: dict[int, int], first: int, end: int) -> str:
    offsets = sorted(acknowledged)
    return f"acknowledged offsets {offsets[:3]}..{offsets[-3:]}, expected {first}..{end - 1}"


def _differences(cluster: Cluster, victim: int, leader: int) -> str:
    """Where the two replicas' segment files differ, for the failure message."""
    mine = {p.name: p.read_bytes() for p in log_files(cluster, victim)}
    theirs = {p.name: p.read_bytes() for p in log_files(cluster, leader)}
    names = sorted(set(mine) | set(theirs))
    differing = [
        f"{n}: {len(mine.get(n, b''))} vs {len(theirs.get(n, b''))} bytes"
        for n in names
        if mine.get(n) != theirs.get(n)
    ]
    return f"node {victim} vs leader {leader}: {differing[:5]} ({len(differing)} files differ)"
