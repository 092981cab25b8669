"""Routing reads the registry without the lock its writes hold (services/gateway/cluster/
registry.py `Registry.route`): a control-plane write keeps that lock while it fsyncs the
registry file or calls etcd, and every Produce and Fetch routes each of its partitions, so
the data path must not queue behind it."""

from __future__ import annotations

import threading

import pytest

from seglog.errors import LeaderNotAvailableError, UnknownTopicOrPartitionError
from services.gateway.cluster.registry import Registry

ANSWER_WITHIN_S = 5.0


@pytest.fixture
def registry(tmp_path):
    registry = Registry(tmp_path / "gateway", session_timeout_ms=60_000)
    registry.register_node(1, "127.0.0.1:9001")
    registry.create_topic("orders", 2, 1, {})
    return registry


def test_a_route_names_the_leader_its_epoch_and_address(registry):
    route = registry.route("orders", 1)
    assert (route.leader, route.leader_epoch, route.address, route.live) == (
        1,
        0,
        "127.0.0.1:9001",
        True,
    )
    with pytest.raises(UnknownTopicOrPartitionError, match="partitions 0..1, not 2"):
        registry.route("orders", 2)
    with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
        registry.route("missing", 0)


def test_a_route_is_answered_while_a_registry_write_holds_the_lock(registry):
    write_started = threading.Event()
    write_may_end = threading.Event()

    def slow_write():  # as a write blocked in its fsync or etcd call
        with registry._state._lock:  # the one lock every part of the registry takes
            write_started.set()
            write_may_end.wait(30)

    writer = threading.Thread(target=slow_write)
    writer.start()
    try:
        assert write_started.wait(ANSWER_WITHIN_S)
        routed = []
        reader = threading.Thread(target=lambda: routed.append(registry.route("orders", 0)))
        reader.start()
        reader.join(ANSWER_WITHIN_S)
        assert not reader.is_alive(), "route waited for the registry's write lock"
        assert routed[0].leader == 1
    finally:
        write_may_end.set()
        writer.join()


def test_a_partition_without_a_leader_is_refused_by_routing(registry):
    registry.controlled_shutdown(1)  # its only replica leaves: nothing may lead
    with pytest.raises(LeaderNotAvailableError, match="orders-0 is offline"):
        registry.route("orders", 0)
