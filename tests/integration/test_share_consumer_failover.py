"""seglog's ShareConsumer across its coordinator's death (real etcd, two gateway processes,
three nodes): the gateway coordinating the group is SIGKILLed mid-stream; the consumer,
bootstrapped at the other, looks the coordinator up again (the dead one unreachable, then
NOT_COORDINATOR until the survivor claims the group), opens a new share session, and goes
on: every record is acknowledged, none twice (a confirmed acknowledgement is never followed
by the record coming back)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from seglog.client import AcknowledgeType, GatewayClient, Producer, ShareConsumer
from seglog.errors import SeglogError
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster

pytestmark = pytest.mark.timeout(300)

TOPIC, COUNT = "queue-failover-grpc", 200
TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 60


def group_coordinated_at(cluster: EtcdBackedCluster, address: str) -> str:
    """A group id whose coordinator is `address` (FindCoordinator asked there: a new group is
    claimed by the gateway first asked about it)."""
    client = GatewayClient(address)
    try:
        for i in range(200):
            group = f"g-failover-{i}"
            if client.group_coordinators.coordinator_of(group) == address:
                return group
    finally:
        client.close()
    raise AssertionError(f"no group coordinated at {address}")


def test_a_share_consumer_goes_on_after_its_coordinator_is_killed(tmp_path):
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
        group = group_coordinated_at(cluster, cluster.gateway_addresses[1])
        confirmed: Counter[tuple[int, int]] = Counter()
        back_after_confirmed: list[tuple[int, int, int]] = []
        killed = False
        deadline = time.monotonic() + 120 + TAKEOVER_S
        with ShareConsumer(
            cluster.gateway_addresses[0], group_id=group, share_acknowledgement_mode="explicit"
        ) as consumer:
            consumer.subscribe([TOPIC])
            while len(confirmed) < COUNT and time.monotonic() < deadline:
                try:
                    records = consumer.poll(timeout_ms=300)
                except SeglogError:
                    continue  # the coordinator gone: the next poll looks it up again
                for r in records:
                    if (r.partition, r.offset) in confirmed:
                        back_after_confirmed.append((r.partition, r.offset, r.delivery_count))
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT)
                try:
                    outcome = consumer.commit_sync()
                except SeglogError:
                    continue  # not confirmed: those records come back and are acked again
                ok = {(tp.partition) for tp, error in outcome.items() if error is None}
                confirmed.update((r.partition, r.offset) for r in records if r.partition in ok)
                if not killed and len(confirmed) >= COUNT // 2:
                    cluster.gateways[1].kill()  # the group's coordinator, mid-stream
                    killed = True
        assert killed
        # Half the records were confirmed after the kill, through the group's new coordinator.
        client = GatewayClient(cluster.gateway_addresses[0])
        try:
            assert client.group_coordinators.coordinator_of(group) == cluster.gateway_addresses[0]
        finally:
            client.close()
        assert sorted(confirmed) == [(p, o) for p in (0, 1) for o in range(COUNT // 2)]
        assert set(confirmed.values()) == {1}, [k for k, v in confirmed.items() if v > 1]
        assert back_after_confirmed == []
    finally:
        cluster.close()
