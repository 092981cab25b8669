"""max.connections.per.ip.overrides in Kafka's syntax, and the counting the Kafka listener's
acceptors and network threads share."""

from __future__ import annotations

import pytest

from services.gateway.kafka.connection_quotas import ConnectionQuotas, parse_overrides
from services.gateway.settings import GatewayConfig


def test_overrides_are_host_count_pairs_and_anything_else_is_named():
    assert parse_overrides("") == {}
    assert parse_overrides("10.0.0.7:2000, localhost:5,[::1]:3") == {
        "10.0.0.7": 2000,
        "localhost": 5,
        "::1": 3,
    }
    for bad in ("10.0.0.7", "10.0.0.7:many", ":5", "10.0.0.7:-1"):
        with pytest.raises(ValueError, match="host:count"):
            parse_overrides(bad)


def test_each_address_is_bounded_alone_and_all_by_max_connections():
    quotas = ConnectionQuotas(5, 2, {"127.0.0.2": 3})
    assert [quotas.try_open("127.0.0.1") for _ in range(3)][:2] == [None, None]
    assert "max.connections.per.ip" in (quotas.try_open("127.0.0.1") or "")
    assert [quotas.try_open("127.0.0.2") for _ in range(3)] == [None] * 3
    assert "max.connections" in (quotas.try_open("127.0.0.3") or "")
    quotas.closed("127.0.0.1")
    assert quotas.open_from("127.0.0.1") == 1 and quotas.total == 4
    assert quotas.try_open("127.0.0.3") is None
    # A name stands for the addresses it resolves to: localhost may hold none.
    assert ConnectionQuotas(5, 2, {"localhost": 0}).try_open("127.0.0.1") is not None


def test_the_gateways_settings_give_the_listener_its_limits():
    config = GatewayConfig(
        max_connections_per_ip=7, max_connections_per_ip_overrides="127.0.0.9:70", num_io_threads=2
    )
    limits = config.kafka_listener_limits
    assert (limits.max_connections_per_ip, limits.num_io_threads) == (7, 2)
    assert limits.max_connections_per_ip_overrides == (("127.0.0.9", 70),)
