"""The group coordinator's unit-test fixtures, shared by the tests of both member kinds
(seglog's managed members and Kafka's classic ones): a registry with one live node holding a
topic `events` of four partitions, and coordinators over it, closed at the end."""

from __future__ import annotations

import pytest

from services.gateway.cluster.registry import Registry
from services.gateway.groups.coordinator import CoordinatorConfig, GroupCoordinator


@pytest.fixture
def registry(tmp_path):
    """One live node holding a topic of four partitions."""
    registry = Registry(tmp_path, session_timeout_ms=600_000)
    registry.register_node(1, "127.0.0.1:1")
    registry.create_topic("events", 4, 1, {})
    return registry


@pytest.fixture
def make_coordinator(registry):
    """Coordinators over the registry, closed (their session reaper stopped) at the end."""
    made: list[GroupCoordinator] = []

    def make(*, persist=None, load=None, **config) -> GroupCoordinator:
        config.setdefault("initial_rebalance_delay_ms", 0)
        coordinator = GroupCoordinator(registry, CoordinatorConfig(**config), persist, load)
        made.append(coordinator)
        return coordinator

    yield make
    for coordinator in made:
        coordinator.close()


@pytest.fixture
def coordinator(make_coordinator):
    return make_coordinator()
