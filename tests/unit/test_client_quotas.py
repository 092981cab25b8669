"""Which quota applies to a call (Kafka's precedence of entities) and how much it is throttled
(a bucket of one second of the rate, debt repaid at the rate), on a clock the test moves."""

from __future__ import annotations

import pytest

from services.gateway.routing.quotas import (
    CONSUMER_BYTE_RATE,
    DEFAULT_NAME,
    MAX_THROTTLE_MS,
    PRODUCER_BYTE_RATE,
    ClientQuotas,
    entity_key,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _quotas(configured: dict) -> tuple[ClientQuotas, Clock]:
    clock = Clock()
    quotas = ClientQuotas(lambda: configured, clock=clock)
    return quotas, clock


def test_a_caller_within_its_burst_is_not_throttled_and_debt_is_repaid_at_the_rate():
    quotas, clock = _quotas({entity_key("alice", None): {PRODUCER_BYTE_RATE: 1000.0}})
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "", 1000) == 0  # the burst
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "", 500) == 501  # 500 B owed
    clock.now += 0.5  # repaid
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "", 100) == 101
    clock.now += 10  # a full bucket again, never more
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "", 1000) == 0
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "", 1) == 2
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "", 10**9) == MAX_THROTTLE_MS
    # Another key, another caller: their own budgets, or none.
    assert quotas.throttle_ms(CONSUMER_BYTE_RATE, "alice", "", 10**6) == 0
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "bob", "", 10**6) == 0


@pytest.mark.parametrize(
    ("configured", "expected_rate"),
    [
        # Kafka's order, most specific first; each row adds a more specific entity.
        ({(None, DEFAULT_NAME): 1}, 1),
        ({(None, DEFAULT_NAME): 1, (None, "etl"): 2}, 2),
        ({(None, "etl"): 2, (DEFAULT_NAME, None): 3}, 3),
        ({(DEFAULT_NAME, None): 3, (DEFAULT_NAME, DEFAULT_NAME): 4}, 4),
        ({(DEFAULT_NAME, DEFAULT_NAME): 4, (DEFAULT_NAME, "etl"): 5}, 5),
        ({(DEFAULT_NAME, "etl"): 5, ("alice", None): 6}, 6),
        ({("alice", None): 6, ("alice", DEFAULT_NAME): 7}, 7),
        ({("alice", DEFAULT_NAME): 7, ("alice", "etl"): 8}, 8),
        # Entities of others never apply.
        ({("bob", None): 1, (None, "other"): 1}, None),
    ],
)
def test_the_most_specific_entity_applies(configured, expected_rate):
    rates = {
        entity_key(user, client): {PRODUCER_BYTE_RATE: rate * 1000.0}
        for (user, client), rate in configured.items()
    }
    quotas, _ = _quotas(rates)
    # One burst's worth at the expected rate passes; one byte more is throttled.
    burst = 0 if expected_rate is None else expected_rate * 1000
    assert quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "etl", burst) == 0
    throttled = quotas.throttle_ms(PRODUCER_BYTE_RATE, "alice", "etl", 1000)
    if expected_rate is None:
        assert throttled == 0
    else:
        assert throttled == int(1000 / expected_rate) + 1


def test_a_named_entity_is_shared_and_a_default_one_is_per_caller():
    shared, _ = _quotas({entity_key(None, "etl"): {PRODUCER_BYTE_RATE: 1000.0}})
    # Two users on client id "etl" draw from one bucket...
    assert shared.throttle_ms(PRODUCER_BYTE_RATE, "u1", "etl", 1000) == 0
    assert shared.throttle_ms(PRODUCER_BYTE_RATE, "u2", "etl", 1000) > 0
    # ...while the default user's quota gives each user a bucket of its own.
    per_user, _ = _quotas({entity_key(DEFAULT_NAME, None): {PRODUCER_BYTE_RATE: 1000.0}})
    assert per_user.throttle_ms(PRODUCER_BYTE_RATE, "u1", "etl", 1000) == 0
    assert per_user.throttle_ms(PRODUCER_BYTE_RATE, "u2", "etl", 1000) == 0
    assert per_user.throttle_ms(PRODUCER_BYTE_RATE, "u2", "etl", 1000) > 0
