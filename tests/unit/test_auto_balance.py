"""Automatic balancing (services/gateway/cluster/auto_balance.py) as registry decisions: a
node joining starts moves bounded in number, never of a partition whose ISR is not full,
topped up as moves finish until replicas and leaders are within one per node; nothing moves
while a node holding replicas is down, nor when the node set has not changed."""

from __future__ import annotations

from services.gateway.cluster.auto_balance import AutoBalancer
from services.gateway.cluster.metadata_file_store import FileMetadataStore
from services.gateway.cluster.registry import Registry


def _registry(tmp_path, nodes=3):
    registry = Registry(tmp_path, store=FileMetadataStore(tmp_path / "metadata"))
    for n in range(1, nodes + 1):
        registry.register_node(n, f"127.0.0.1:{n}")
    return registry


def _catch_up(registry):
    """What the leaders do as the adding replicas catch up: each joins its ISR."""
    for topic, i, p in registry.reassignments():
        registry.alter_partition(
            p.leader, topic.name, i, p.leader_epoch, p.partition_epoch, sorted(p.replicas)
        )
    registry.complete_reassignments()


def _spread(registry):
    held = {n: 0 for n in registry.nodes}
    led = {n: 0 for n in registry.nodes}
    for topic in registry.topics.values():
        for p in topic.partitions:
            for r in p.replicas:
                held[r] += 1
            led[p.leader] += 1
    return held, led


def test_a_joining_node_is_balanced_in_bounded_rounds_skipping_partitions_out_of_sync(tmp_path):
    registry = _registry(tmp_path)
    registry.create_topic("t", 8, 2, {})
    balancer = AutoBalancer(registry, max_moves=2, throttle_bytes_per_s=5000)
    balancer.tick()
    assert not balancer.pending  # the first look only notes the nodes
    # One partition's ISR is not full: it must stay where it is.
    lagging = registry.topic("t").partitions[0]
    follower = next(r for r in lagging.replicas if r != lagging.leader)
    registry.alter_partition(
        lagging.leader, "t", 0, lagging.leader_epoch, lagging.partition_epoch, [lagging.leader]
    )
    registry.register_node(4, "127.0.0.1:4")

    rounds = 0
    while True:
        balancer.tick()
        if not balancer.pending:
            break
        placement = registry.placement()
        assert placement.moves_in_flight <= 2
        moving = {(t.name, i): p for t, i, p in registry.reassignments()}
        assert ("t", 0) not in moving
        assert all(p.throttle_bytes_per_s == 5000 for p in moving.values())
        _catch_up(registry)
        rounds += 1
        assert rounds < 20, _spread(registry)
    assert balancer.rounds >= 2  # 16 replicas over 4 nodes: 4 moves, at most 2 at once
    held, led = _spread(registry)
    assert max(held.values()) - min(held.values()) <= 1, held
    assert max(led.values()) - min(led.values()) <= 1, led
    assert held[4] == 4
    p0 = registry.topic("t").partitions[0]
    assert sorted(p0.replicas) == sorted([lagging.leader, follower])

    balancer.tick()  # balanced, the node set unchanged: nothing more
    assert not registry.reassignments() and not balancer.pending


def test_nothing_moves_while_a_node_holding_replicas_is_down(tmp_path):
    registry = _registry(tmp_path)
    registry.create_topic("t", 6, 2, {})
    balancer = AutoBalancer(registry, max_moves=4)
    balancer.tick()
    registry.register_node(4, "127.0.0.1:4")
    registry.controlled_shutdown(1)  # node 1 restarting: not eligible, still holds replicas
    balancer.tick()
    assert balancer.pending and not registry.reassignments()
    assert registry.placement().absent_holders == [1]


def test_an_operators_reassignment_takes_precedence_over_a_pending_balance(tmp_path):
    registry = _registry(tmp_path)
    registry.create_topic("t", 6, 2, {})
    balancer = AutoBalancer(registry, max_moves=1)
    balancer.tick()
    registry.register_node(4, "127.0.0.1:4")
    balancer.tick()
    assert balancer.pending and len(registry.reassignments()) == 1  # one move at a time
    _catch_up(registry)
    # The operator decommissions node 4 (it holds one replica now): the balancer stands by.
    [(topic, i, p)] = [
        (t, i, p)
        for t in registry.topics.values()
        for i, p in enumerate(t.partitions)
        if 4 in p.replicas
    ]
    free = next(n for n in (1, 2, 3) if n not in p.replicas)
    registry.alter_reassignments({(topic.name, i): [free if r == 4 else r for r in p.replicas]})
    balancer.tick()
    assert not balancer.pending
    _catch_up(registry)
    balancer.tick()
    assert not registry.reassignments() and registry.replica_counts().get(4, 0) == 0


def test_a_decommissioned_node_is_never_a_balancing_target(tmp_path):
    registry = _registry(tmp_path, nodes=3)
    registry.create_topic("t", 6, 2, {})
    registry.register_node(4, "127.0.0.1:4")
    registry.set_decommissioned(4, True)
    balancer = AutoBalancer(registry, max_moves=100)
    for _ in range(5):
        balancer.tick()
        _catch_up(registry)
    assert _spread(registry)[0][4] == 0
