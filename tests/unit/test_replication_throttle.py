"""The reassignment throttle's budget (services/storage_node/replication_throttle.py): bytes
charged at a rate are paid back over time, a short debt is carried rather than waited out,
and a round asks for a share of a second's budget."""

from __future__ import annotations

import time

from services.storage_node.replication_throttle import (
    CARRIED_DEBT_S,
    MIN_ROUND_BYTES,
    ReplicationThrottle,
    round_max_bytes,
)
from tests.waiting import wait_until


def test_a_debt_is_waited_out_only_past_what_is_carried():
    throttle = ReplicationThrottle()
    rate = 1_000_000
    assert throttle.charge(int(rate * CARRIED_DEBT_S / 2), rate) == 0.0  # carried
    wait_s = throttle.charge(rate // 2, rate)  # now about half a second owed
    assert 0.45 < wait_s <= 0.5 + CARRIED_DEBT_S
    assert 0 < throttle.wait_s() <= wait_s
    assert throttle.throttled_bytes == int(rate * CARRIED_DEBT_S / 2) + rate // 2


def test_the_debt_is_paid_back_at_the_rate():
    throttle = ReplicationThrottle()
    rate = 10_000_000
    started = time.monotonic()
    throttle.charge(rate // 10, rate)  # 0.1 s owed
    assert throttle.wait_s() > 0
    assert wait_until(lambda: throttle.wait_s() == 0.0, 5)
    assert time.monotonic() - started >= 0.1 - CARRIED_DEBT_S


def test_a_round_asks_for_a_share_of_a_seconds_budget():
    assert round_max_bytes(4_000_000, 1 << 20) == 1_000_000
    assert round_max_bytes(10_000, 1 << 20) == MIN_ROUND_BYTES
    assert round_max_bytes(100_000_000, 1 << 20) == 1 << 20
