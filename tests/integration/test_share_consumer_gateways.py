"""seglog's share consumers on two gateways (real etcd, two gateway processes, three nodes):
consumers of one share group bootstrapped at different gateways reach the group's
coordinator (FindCoordinator), read every record once between them, and a record one of them
rejects never comes back to either."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from seglog.client import AcknowledgeType, Producer, ShareConsumer
from tests.multi_gateway import EtcdBackedCluster

# Two gateways on etcd and three nodes: share consumers at both read every record once. In
# make test-long, to keep make test within its 10 minutes; make test keeps the single-gateway
# share consumer tests and test_share_consumer_failover (two gateways, a coordinator killed).
pytestmark = [pytest.mark.long, pytest.mark.timeout(240)]

TOPIC, GROUP, COUNT = "queue-grpc", "g-grpc-gateways", 200


def test_share_consumers_at_two_gateways_read_every_record_once(tmp_path):
    cluster = EtcdBackedCluster(
        tmp_path,
        gateway_args=(
            "--share-coordinator-state-topic-num-partitions", "1",
            "--share-auto-offset-reset", "earliest",
        ),
    )  # fmt: skip
    try:
        cluster.admin(0).create_topic(TOPIC, 2, 3)
        with Producer(cluster.gateway_addresses[0], linger_ms=5) as producer:
            for i in range(COUNT):
                producer.send(TOPIC, b"%d" % i, partition=i % 2)
            producer.flush()
        seen: list[tuple[int, int, int]] = []
        by_address: Counter[str] = Counter()
        lock = threading.Lock()
        done = threading.Event()
        failures: list[BaseException] = []

        def run(address: str) -> None:
            try:
                with ShareConsumer(
                    address, group_id=GROUP, share_acknowledgement_mode="explicit"
                ) as consumer:
                    consumer.subscribe([TOPIC])
                    while not done.is_set():
                        records = consumer.poll(timeout_ms=300)
                        for r in records:
                            rejected = (r.partition, r.offset) == (0, 7)
                            kind = AcknowledgeType.REJECT if rejected else AcknowledgeType.ACCEPT
                            consumer.acknowledge(r, kind)
                        assert all(e is None for e in consumer.commit_sync().values())
                        with lock:
                            seen.extend((r.partition, r.offset, r.delivery_count) for r in records)
                            by_address[address] += len(records)
                            if len(seen) >= COUNT:
                                done.set()
            except BaseException as exc:  # reported by the test below
                failures.append(exc)
                done.set()

        threads = [threading.Thread(target=run, args=(a,)) for a in cluster.gateway_addresses]
        for t in threads:
            t.start()
        try:
            assert done.wait(120), f"{len(seen)} of {COUNT} records read"
        finally:
            done.set()
            for t in threads:
                t.join(60)
        assert not failures, failures
        counts = Counter((p, o) for p, o, _ in seen)
        assert sorted(counts) == [(p, o) for p in (0, 1) for o in range(COUNT // 2)]
        assert set(counts.values()) == {1} and {c for *_, c in seen} == {1}
        # Two members, two partitions: each reads one (the simple assignor), whichever
        # gateway it was bootstrapped at.
        assert set(by_address) == set(cluster.gateway_addresses), by_address
    finally:
        cluster.close()
