"""An idle partition's ISR grows back after its follower returns, even when the gateway that
holds the registry (the controller) is SIGKILLed as the follower rejoins: in Kafka a follower
of an idle partition keeps fetching and is added back as soon as it reaches the leader's log
end, whatever the traffic. Real processes: two gateways on a real etcd, three nodes; no
record is produced during the test."""

from __future__ import annotations

import pytest

from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.waiting import wait_until

LAG_TIME_MAX_MS = 1500
TOPIC = "idle"
PARTITIONS = 4
TAKEOVER_S = 3 * SESSION_TIMEOUT_MS / 1000 + 10  # a lease TTL, with room for a slow machine
# Rejoining: the restarted node registers, the leaders see its fetch at their log end, the
# (new) controller takes the AlterPartition; generous for a loaded two-core machine.
REJOIN_S = 45


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    running = EtcdBackedCluster(
        tmp_path_factory.mktemp("idle-isr"),
        node_args=("--config", f"replica.lag.time.max.ms={LAG_TIME_MAX_MS}"),
    )
    yield running
    running.close()


def isrs(cluster: EtcdBackedCluster, index: int, topic: str = TOPIC) -> list[list[int]] | None:
    """Each partition's ISR as gateway `index` holds it (None: it does not answer)."""
    try:
        with cluster.admin(index) as admin:
            return [sorted(p.isr) for p in admin.describe_topic(topic).partitions]
    except Exception:  # a gateway just killed or starting: ask again
        return None


def left_every_isr(cluster: EtcdBackedCluster, node_id: int, topic: str = TOPIC) -> bool:
    found = isrs(cluster, 0, topic)
    return found is not None and all(node_id not in isr for isr in found)


def controller_index(cluster: EtcdBackedCluster) -> int:
    for index in range(len(cluster.gateways)):
        controller = cluster.controller(index)
        if controller in cluster.gateway_addresses:
            return cluster.gateway_addresses.index(controller)
    raise AssertionError("no gateway names a controller")


@pytest.mark.long  # the ISR sender's survival stays in make test (tests/unit/test_isr_updates.py)
@pytest.mark.slow
def test_an_idle_partitions_isr_grows_back_across_a_controller_kill(cluster):
    with cluster.admin(0) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3)
    full = [[1, 2, 3]] * PARTITIONS
    assert wait_until(lambda: isrs(cluster, 0) == full, 30), isrs(cluster, 0)
    for victim in (2, 3):
        cluster.nodes[victim].kill()
        # Its session's end (the controller fences it) or the leaders' lag check drops it
        # from every ISR; with no traffic nothing else changes the partitions.
        assert wait_until(lambda v=victim: left_every_isr(cluster, v), TAKEOVER_S), isrs(cluster, 0)
        controller = controller_index(cluster)
        # The controller dies as the node it must let back into the ISRs registers and
        # fetches again (start returns once the node serves).
        cluster.nodes[victim].start()
        cluster.gateways[controller].kill()
        cluster.gateways[controller].start()
        assert wait_until(
            lambda: isrs(cluster, 0) == full and isrs(cluster, 1) == full, REJOIN_S
        ), (isrs(cluster, 0), isrs(cluster, 1))


@pytest.mark.long  # the killed follower's case stays in make test; this pause variant is long
def test_a_paused_followers_idle_partitions_rejoin_across_a_controller_kill(cluster):
    # The follower's process lives on (its fetch sessions too, nothing of its state is
    # new): the leaders add it back only from its fetches at their idle log ends.
    topic = "idle-paused"
    with cluster.admin(0) as admin:
        admin.create_topic(topic, PARTITIONS, 3)
    full = [[1, 2, 3]] * PARTITIONS
    assert wait_until(lambda: isrs(cluster, 0, topic) == full, 30), isrs(cluster, 0, topic)
    victim = cluster.nodes[1]
    cluster.pause(victim)
    try:
        assert wait_until(lambda: left_every_isr(cluster, 1, topic), TAKEOVER_S), isrs(
            cluster, 0, topic
        )
        controller = controller_index(cluster)
    finally:
        cluster.resume(victim)
    cluster.gateways[controller].kill()
    cluster.gateways[controller].start()
    assert wait_until(
        lambda: isrs(cluster, 0, topic) == full and isrs(cluster, 1, topic) == full, REJOIN_S
    ), (isrs(cluster, 0, topic), isrs(cluster, 1, topic))
