"""Automatic balancing on a real cluster (in-process gateway and nodes on loopback): a
fourth node joins a three-node cluster with `auto.balance.enable` while acks=all producers
write to every partition; the controller moves replicas onto it, never more than
`auto.balance.max.moves` being added at once, each catch-up throttled, until replicas and
leaders are within one per node; then node 4 is decommissioned (the balancer stands by) and
stopped, and the three left are evened out; every acknowledged record is read back, once."""

from __future__ import annotations

import threading

import pytest

from seglog.client import Consumer, Producer
from seglog.client.reassignment_plans import decommission
from seglog.client.structs import TopicPartition
from tests.cluster import LocalCluster
from tests.waiting import wait_for

FAST = {
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "replica.lag.time.max.ms": "3000",
}
TOPIC = "balanced"
PARTITIONS = 8
MAX_MOVES = 2
THROTTLE_BYTES_PER_S = 2_000_000


class Load:
    """acks=all sends to every partition in turn, each waited for; records what was
    acknowledged (an error is not an acknowledgement)."""

    def __init__(self, address: str) -> None:
        self.acknowledged: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[Exception] = []
        self._producer = Producer(address, acks="all", linger_ms=2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="balance-load", daemon=True)
        self._thread.start()

    @property
    def count(self) -> int:
        return sum(len(values) for values in self.acknowledged.values())

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            partition = i % PARTITIONS
            value = b"load-%08d" % i
            i += 1
            try:
                self._producer.send(TOPIC, value, partition=partition).get(timeout=30)
                self.acknowledged[partition].append(value)
            except Exception as exc:
                self.errors.append(exc)
            self._stop.wait(0.002)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=40)
        self._producer.close()


def _spread(cluster):
    registry = cluster.gateway.registry
    held = {n: 0 for n in registry.live_nodes()}
    led = dict.fromkeys(held, 0)
    for topic in registry.topics.values():
        for p in topic.partitions:
            for r in p.replicas:
                held[r] = held.get(r, 0) + 1
            led[p.leader] = led.get(p.leader, 0) + 1
    return held, led


def _balanced(cluster, nodes: int = 4) -> bool:
    if cluster.gateway.registry.reassignments():
        return False
    held, led = _spread(cluster)
    return (
        len(held) == nodes
        and max(held.values()) - min(held.values()) <= 1
        and max(led.values()) - min(led.values()) <= 1
    )


def _read_partition(cluster, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer(cluster.address, auto_offset_reset="earliest")
    consumer.assign([(TOPIC, partition)])
    values: list[bytes] = []
    try:
        wait_for(
            lambda: (
                values.extend(r.value for r in consumer.poll_records(timeout_ms=500))
                or len(values) >= expected
            ),
            30,
            f"{expected} records of {TOPIC}-{partition}",
        )
    finally:
        consumer.close()
    return values


@pytest.mark.slow
def test_a_joining_node_is_balanced_automatically_under_load_losing_nothing(tmp_path):
    cluster = LocalCluster(
        tmp_path,
        nodes=3,
        node_configs={**FAST, "min.insync.replicas": "2"},
        auto_balance_enable=True,
        auto_balance_max_moves=MAX_MOVES,
        auto_balance_throttle_bytes_per_s=THROTTLE_BYTES_PER_S,
        auto_balance_interval_ms=200,
    )
    load = None
    try:
        cluster.admin.create_topic(TOPIC, PARTITIONS, 3)
        load = Load(cluster.address)
        wait_for(lambda: load.count >= 200, 30, "the load running")
        registry = cluster.gateway.registry
        balancer = cluster.gateway.controller.auto_balancer
        assert balancer is not None and balancer.rounds == 0
        assert not registry.reassignments()  # three nodes, nothing to balance

        cluster.start_node(4)
        most_in_flight = 0
        throttles = set()

        def balanced_yet() -> bool:
            nonlocal most_in_flight
            placement = registry.placement()
            most_in_flight = max(most_in_flight, placement.moves_in_flight)
            throttles.update(p.throttle_bytes_per_s for _, _, p in registry.reassignments())
            return _balanced(cluster) and not balancer.pending

        wait_for(balanced_yet, 120, "node 4 balanced", lambda: str(_spread(cluster)))
        held, led = _spread(cluster)
        assert held[4] == 6 and led[4] == 2, (held, led)  # 24 replicas, 8 leaders, 4 nodes
        assert balancer.rounds >= 3  # 6 replica moves, at most 2 at once
        assert most_in_flight <= MAX_MOVES  # sampled; the unit test checks every round
        assert throttles <= {THROTTLE_BYTES_PER_S}

        # Node 4 leaves for good: decommissioned (the balancer stands by, so it stays
        # empty), then stopped; the three left are evened out again.
        rounds_before = balancer.rounds
        current = {
            TopicPartition(TOPIC, i): list(p.replicas)
            for i, p in enumerate(registry.topic(TOPIC).partitions)
        }
        plan = decommission(current, 4, [1, 2, 3])
        cluster.admin.alter_partition_reassignments(plan)
        wait_for(
            lambda: not registry.reassignments() and not registry.replica_counts().get(4),
            60,
            "node 4 emptied",
            lambda: str(_spread(cluster)),
        )
        assert balancer.rounds == rounds_before and not balancer.pending
        cluster.stop_node(4)
        wait_for(
            lambda: 4 not in registry.live_nodes() and _balanced(cluster, 3),
            60,
            "three nodes balanced",
            lambda: str(_spread(cluster)),
        )
        acknowledged_when_balanced = load.count
        wait_for(lambda: load.count >= acknowledged_when_balanced + 100, 30, "load after")
        load.stop()
        assert not registry.replica_counts().get(4)
        for partition, acknowledged in load.acknowledged.items():
            values = _read_partition(cluster, partition, len(acknowledged))
            assert set(acknowledged) <= set(values), f"partition {partition} lost records"
            assert len(set(values)) == len(values), f"partition {partition} has duplicates"
    finally:
        if load is not None:
            load.stop()
        cluster.close()
