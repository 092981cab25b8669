"""A decommissioned node stays decommissioned (a record in the registry's metadata log): after
a gateway restart, and with two gateways on etcd after the controller moves, no topic created
afterwards is placed on it or led by it; `nodes list` shows it; a reassignment naming it is
refused; `nodes recommission` lets new topics use it again. Real gateways and nodes on
loopback (in-process with the file registry, separate processes with etcd)."""

from __future__ import annotations

import pytest
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidReplicationAssignmentError

from seglog.client.structs import TopicPartition
from seglog.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError
from tests.cluster import LocalCluster, cli_in_process
from tests.multi_gateway import SESSION_TIMEOUT_MS, EtcdBackedCluster
from tests.waiting import wait_for, wait_until

FAST = {
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "replica.lag.time.max.ms": "2000",
}


def _placed(admin, topic: str) -> tuple[set[int], set[int]]:
    """The nodes holding a replica of `topic`, and those leading one of its partitions."""
    described = admin.describe_topic(topic)
    return (
        {r for p in described.partitions for r in p.replicas},
        {p.leader for p in described.partitions},
    )


def _fully_in_sync(cluster, topic: str) -> bool:
    return all(
        set(p.isr) == set(p.replicas) for p in cluster.gateway.registry.topic(topic).partitions
    )


def test_decommission_holds_across_a_gateway_restart_until_recommissioned(
    tmp_path, capsys, monkeypatch
):
    cluster = LocalCluster(tmp_path, nodes=3, node_configs=FAST)
    try:
        cluster.admin.create_topic("before", 3, 2)  # node 3 leads one of them, at least
        assert 3 in _placed(cluster.admin, "before")[1]
        wait_for(lambda: _fully_in_sync(cluster, "before"), 15, "before fully in sync")

        code, out, err = cli_in_process(
            cluster, capsys, monkeypatch, "nodes", "decommission", "--node", "3", "--dry-run"
        )
        assert code == 0, err
        assert cluster.gateway.registry.decommissioned_nodes() == set()  # a plan only
        code, out, err = cli_in_process(
            cluster, capsys, monkeypatch, "nodes", "decommission", "--node", "3"
        )
        assert code == 0, err
        assert "Node 3 holds no replica" in out

        cluster.restart_gateway()
        wait_for(lambda: cluster.gateway.registry.live_nodes() == [1, 2, 3], 15, "nodes back")

        cluster.admin.create_topic("after", 6, 2)
        held, led = _placed(cluster.admin, "after")
        assert 3 not in held and 3 not in led, (held, led)
        assert "Node 3 is decommissioned" in out  # said so first
        # Two nodes take new replicas: a third replica has nowhere to go, and says why.
        with pytest.raises(InvalidReplicationFactorError, match=r"decommissioned.*\[3\]"):
            cluster.admin.create_topic("three", 1, 3)
        cluster.admin.create_partitions("after", 8)
        assert 3 not in _placed(cluster.admin, "after")[0]
        with pytest.raises(InvalidReplicaAssignmentError, match="decommissioned"):
            cluster.admin.alter_partition_reassignments({TopicPartition("after", 0): [1, 3]})
        kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_address)
        try:  # Kafka's AlterPartitionReassignments: INVALID_REPLICA_ASSIGNMENT
            tp = KafkaTopicPartition("after", 0)
            refused = kafka_admin.alter_partition_reassignments({tp: [1, 3]})
            assert refused == {tp: InvalidReplicationAssignmentError}
        finally:
            kafka_admin.close()

        code, out, err = cli_in_process(cluster, capsys, monkeypatch, "nodes", "list")
        assert code == 0, err
        rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
        assert rows["3"][2:4] == ["yes", "decommissioned"], out
        assert rows["1"][3] == rows["2"][3] == "active", out

        code, out, err = cli_in_process(
            cluster, capsys, monkeypatch, "nodes", "recommission", "--node", "3"
        )
        assert code == 0, err
        cluster.admin.create_topic("again", 3, 2)  # node 3 holds fewest: it gets some
        held, led = _placed(cluster.admin, "again")
        assert 3 in held and 3 in led, (held, led)
    finally:
        cluster.close()


def test_a_decommissioned_node_hands_over_its_leaderships_but_not_a_last_replica(
    tmp_path, capsys, monkeypatch
):
    cluster = LocalCluster(tmp_path, nodes=3, node_configs=FAST)
    try:
        cluster.admin.create_topic("shared", 3, 3)
        cluster.admin.create_topic("alone", 3, 1)
        # Three replicas on three nodes: nowhere to move node 3's, so it is not even marked.
        code, _, err = cli_in_process(
            cluster, capsys, monkeypatch, "nodes", "decommission", "--node", "3"
        )
        assert code == 1 and "no node of [1, 2] is free" in err, err
        assert cluster.gateway.registry.decommissioned_nodes() == set()
        wait_for(lambda: _fully_in_sync(cluster, "shared"), 15, "shared fully in sync")
        registry = cluster.gateway.registry
        alone_on_3 = [i for i, p in enumerate(registry.topic("alone").partitions) if p.leader == 3]
        assert alone_on_3 and 3 in _placed(cluster.admin, "shared")[1]

        cluster.admin.decommission_node(3)
        assert 3 not in _placed(cluster.admin, "shared")[1]
        # Its only replica: it keeps leading (offline would stop writes while it is up).
        for i in alone_on_3:
            assert registry.topic("alone").partitions[i].leader == 3
        # The controller's preferred-leader rebalance does not give it back either.
        registry.rebalance_leaders()
        assert 3 not in _placed(cluster.admin, "shared")[1]
        # Once another replica is in sync, the rebalance takes the last one off it too.
        moved = TopicPartition("alone", alone_on_3[0])
        cluster.admin.alter_partition_reassignments({moved: [3, 1]})
        wait_for(lambda: not cluster.admin.list_partition_reassignments([moved]), 15, "alone moved")
        assert registry.topic("alone").partitions[moved.partition].leader == 3
        registry.rebalance_leaders()
        assert registry.topic("alone").partitions[moved.partition].leader == 1
        cluster.admin.recommission_node(3)
        registry.rebalance_leaders()
        assert 3 in _placed(cluster.admin, "shared")[1]
    finally:
        cluster.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_decommission_holds_when_the_controller_moves_to_another_gateway(tmp_path):
    cluster = EtcdBackedCluster(tmp_path, gateways=2, nodes=3)
    try:
        a, b = cluster.gateway_addresses
        with cluster.admin(0) as admin:
            admin.decommission_node(3)
        cluster.gateways[0].stop(grace_s=10)  # the controller
        assert wait_until(lambda: cluster.controller(1) == b, 3 * SESSION_TIMEOUT_MS / 1000 + 10)
        with cluster.admin(1) as admin:
            admin.create_topic("after", 6, 2)
            held, led = _placed(admin, "after")
            assert 3 not in held and 3 not in led, (held, led)
        [node_3] = [n for n in cluster.describe_cluster(1).nodes if n.node_id == 3]
        assert node_3.decommissioned and node_3.live
    finally:
        cluster.close()
