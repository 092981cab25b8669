"""The transaction coordinator's parked calls (transactions/completion_waits.py): released
when the id's completion ends, ended at their deadline otherwise, and a call cancelled
meanwhile (its connection closed) costs nothing; what the parked calls add is handed to the
completion once, for the producer they were checked against."""

from __future__ import annotations

import pytest

from services.gateway.transactions.completion_waits import NOTHING_PARKED, CompletionWaits
from services.gateway.transactions.state import TxnState
from tests.waiting import wait_until


@pytest.fixture
def waits():
    w = CompletionWaits(max_wait_s=60.0)
    yield w
    w.stop()


def test_a_release_ends_every_wait_of_that_id_and_no_other(waits):
    first, second, other = waits.wait("a"), waits.wait("a"), waits.wait("b")
    assert not first.done() and waits.waiting() == 3
    waits.release("a")
    assert first.done() and second.done() and not other.done()
    assert waits.waiting() == 1
    waits.release("a")  # nothing waits on it now: no harm


def test_a_wait_ends_at_its_deadline_when_nothing_releases_it():
    waits = CompletionWaits(max_wait_s=0.05)
    try:
        late = waits.wait("slow")
        assert wait_until(late.done, 5)
        assert waits.waiting() == 0
    finally:
        waits.stop()


def test_a_cancelled_wait_is_passed_over(waits):
    gone, kept = waits.wait("a"), waits.wait("a")
    assert gone.cancel()
    waits.release("a")
    assert gone.cancelled() and kept.done() and not kept.cancelled()


def test_stop_ends_the_waits_left():
    waits = CompletionWaits(max_wait_s=60.0)
    left = waits.wait("a")
    waits.stop()
    assert left.done()


def test_parked_adds_are_kept_for_the_completion_once_and_dropped_on_release(waits):
    waits.park("a", (7, 1), [("t", 0)], set())
    waits.park("a", (7, 1), [("__consumer_offsets", 3)], {"g"})
    waits.park("a", (8, 0), [("t", 9)], set())  # another producer's: not the id's producer
    parked = waits.take_parked("a")
    assert parked.ongoing(7, 1, 1000) == {
        "state": TxnState.ONGOING,
        "partitions": {("t", 0), ("__consumer_offsets", 3)},
        "groups": {"g"},
        "start_ms": 1000,
    }
    assert parked.ongoing(7, 2, 1000) is None  # fenced since: nothing follows
    assert waits.take_parked("a") is NOTHING_PARKED
    waits.park("b", (7, 1), [("t", 0)], set())
    waits.release("b")
    assert waits.take_parked("b") is NOTHING_PARKED


def test_a_wait_past_its_deadline_drops_what_its_call_added():
    waits = CompletionWaits(max_wait_s=0.05)
    try:
        late = waits.park("slow", (7, 1), [("t", 0)], set())
        assert wait_until(late.done, 5)
        assert waits.take_parked("slow") is NOTHING_PARKED
    finally:
        waits.stop()
