"""The reassignment throttle's budget (services/storage_node/replication_throttle.py): bytes
charged at a rate are paid back over time, a short debt is carried rather than waited out,
and a round asks for a share of a second's budget."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from services.storage_node import replication_throttle
from services.storage_node.replication_throttle import (
    CARRIED_DEBT_S,
    MIN_ROUND_BYTES,
    ReplicationThrottle,
    round_max_bytes,
)


class Clock:
    """The throttle's time.monotonic, moved by the test: a budget is arithmetic over time,
    and a loaded machine must not move it."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    # The module's own view of `time`, not the process's clock.
    monkeypatch.setattr(replication_throttle, "time", SimpleNamespace(monotonic=clock))
    return clock


def test_a_debt_is_waited_out_only_past_what_is_carried(clock):
    throttle = ReplicationThrottle()
    rate = 1_000_000
    assert throttle.charge(int(rate * CARRIED_DEBT_S / 2), rate) == 0.0  # carried
    wait_s = throttle.charge(rate // 2, rate)  # now half a second owed, and what was carried
    assert wait_s == pytest.approx(0.5 + CARRIED_DEBT_S / 2)
    clock.now_s += 0.25
    assert throttle.wait_s() == pytest.approx(wait_s - 0.25)
    assert throttle.throttled_bytes == int(rate * CARRIED_DEBT_S / 2) + rate // 2


def test_the_debt_is_paid_back_at_the_rate(clock):
    throttle = ReplicationThrottle()
    rate = 10_000_000
    assert throttle.charge(rate // 10, rate) == pytest.approx(0.1)  # 0.1 s owed
    clock.now_s += 0.1 - CARRIED_DEBT_S - 0.01
    assert throttle.wait_s() == pytest.approx(CARRIED_DEBT_S + 0.01)
    clock.now_s += 0.02  # what is left is carried
    assert throttle.wait_s() == 0.0
    clock.now_s += 1.0  # paid back: a new charge starts from now, not from the past
    assert throttle.charge(rate // 10, rate) == pytest.approx(0.1)


def test_a_round_asks_for_a_share_of_a_seconds_budget():
    assert round_max_bytes(4_000_000, 1 << 20) == 1_000_000
    assert round_max_bytes(10_000, 1 << 20) == MIN_ROUND_BYTES
    assert round_max_bytes(100_000_000, 1 << 20) == 1 << 20
