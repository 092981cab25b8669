"""Transfer grants (seglog.rpc.grants): a verified grant is remembered by its exact bytes and
signature, its expiry still checked at each use; a holder's own grants are sent again until
they near their expiry. The clock is the test's own (`time_ns` set)."""

from __future__ import annotations

import pytest

from seglog.errors import InvalidRequestError
from seglog.rpc import grants

SECRET = b"0123456789abcdef-grants"
NOW_MS = 1_800_000_000_000


@pytest.fixture
def clock(monkeypatch):
    now = [NOW_MS]
    monkeypatch.setattr(grants.time, "time_ns", lambda: now[0] * 1_000_000)
    return now


def test_a_remembered_grant_is_still_refused_once_expired_or_with_another_signature(clock):
    grant, signature, expires_at_ms = grants.issue(SECRET, 1, [("t", 0, 0, 3)], ttl_ms=60_000)
    first = grants.verify(SECRET, grant, signature, 1)
    assert grants.verify(SECRET, grant, signature, 1) is first  # the same bytes: remembered
    assert first.partitions == {("t", 0): (0, 3)}
    forged = bytes(signature[:-1]) + bytes([signature[-1] ^ 1])
    with pytest.raises(InvalidRequestError, match="does not verify"):
        grants.verify(SECRET, grant, forged, 1)
    with pytest.raises(InvalidRequestError, match="issued for node 1"):
        grants.verify(SECRET, grant, signature, 2)
    with pytest.raises(InvalidRequestError, match="does not verify"):
        grants.verify(b"another secret, 16+ chars", grant, signature, 1)
    clock[0] = expires_at_ms  # remembered, and now expired
    with pytest.raises(InvalidRequestError, match="expired 0 ms ago"):
        grants.verify(SECRET, grant, signature, 1)


def test_a_holder_sends_one_grant_per_partition_set_until_it_nears_expiry(clock):
    made = grants.ReusedGrants(SECRET, 2, replica_id=3, ttl_ms=30_000, renew_margin_ms=10_000)
    one = made.get((("t", 0),))
    clock[0] += 19_999  # 10,001 ms left: still sent
    assert made.get((("t", 0),)) == one
    other = made.get((("t", 0), ("t", 1)))
    assert other != one
    verified = grants.verify(SECRET, *other, 2)
    assert verified.replica_id == 3 and set(verified.partitions) == {("t", 0), ("t", 1)}
    clock[0] += 2  # 9,999 ms left: a new one
    renewed = made.get((("t", 0),))
    assert renewed != one
    assert grants.verify(SECRET, *renewed, 2).expires_at_ms == clock[0] + 30_000
    relay = grants.ReusedGrants(SECRET, 2, produce_relay=True)
    assert grants.verify(SECRET, *relay.get(), 2).produce_relay
