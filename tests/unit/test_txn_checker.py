"""The transactional campaign's checker (tests/faults/txn_checker.py) on hand-built
histories: each of Jepsen's transactional anomalies, planted in an otherwise clean history, is
caught (and only it), and the clean history is valid."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.faults import txn_checker
from tests.faults.history import Event
from tests.faults.txn_checker import READ_COMMITTED, READ_UNCOMMITTED, check_transactions

_clock = itertools.count(1_000)


def event(process: str, type_: str, f: str, value: Any) -> Event:
    return Event(process, type_, f, value, next(_clock))


def txn(
    name: str,
    writes: list[tuple[int, str]],
    outcome: str,
    intent: str = "commit",
    offsets: list[tuple[int, int, str]] = (),
    process: str = "producer-0",
) -> list[Event]:
    invoke = event(
        process,
        "invoke",
        "txn",
        {"txn": name, "writes": [list(w) for w in writes], "intent": intent},
    )
    if outcome == "pending":
        return [invoke]
    completion = {"txn": name, "offsets": [list(o) for o in offsets]}
    return [invoke, event(process, outcome, "txn", completion)]


def poll(
    records: list[tuple[int, int, str]], isolation: str = READ_COMMITTED, process: str = "rc-0"
):
    return event(
        process, "ok", "poll", {"isolation": isolation, "records": [list(r) for r in records]}
    )


def assign(process: str = "rc-0") -> Event:
    return event(process, "ok", "assign", {})


def final(partition: int, records: list[tuple[int, str]], isolation: str) -> Event:
    return event(
        "final-reader",
        "ok",
        "final-read",
        {
            "partition": partition,
            "isolation": isolation,
            "records": [list(r) for r in records],
            "end_offset": (records[-1][0] + 1) if records else 0,
        },
    )


def lso(offsets: dict[int, int], process: str = "rc-0") -> list[Event]:
    return [
        event(process, "invoke", "lso", {}),
        event(process, "ok", "lso", {"offsets": {str(p): o for p, o in offsets.items()}}),
    ]


def stable(partition: int, lso_offset: int, hw: int) -> Event:
    return event(
        "final-reader",
        "ok",
        "stable",
        {"partition": partition, "lso": lso_offset, "hw": hw, "waited_ms": 30000},
    )


# The clean history: t1 committed over partitions 0 and 1, t2 aborted (its records in the
# log, skipped by read_committed readers), t3 unknown and committed, t4 unknown and aborted.
# Log: p0 = [t1-a, t2-a, ctl, ctl, t3-a, ctl]; p1 = [t1-b, ctl, t4-a, ctl].
P0_LOG = [(0, "t1-a"), (1, "t2-a"), (4, "t3-a")]
P1_LOG = [(0, "t1-b"), (2, "t4-a")]


def clean_writes() -> list[Event]:
    return [
        *txn("t1", [(0, "t1-a"), (1, "t1-b")], "ok", offsets=[(0, 0, "t1-a"), (1, 0, "t1-b")]),
        *txn("t2", [(0, "t2-a")], "fail", intent="abort"),
        *txn("t3", [(0, "t3-a")], "info"),
        *txn("t4", [(1, "t4-a")], "pending", process="producer-1"),
    ]


def clean_reads() -> list[Event]:
    return [
        assign(),
        *lso({0: 0, 1: 0}),
        poll([(0, 0, "t1-a")]),
        *lso({0: 4, 1: 2}),
        poll([(1, 0, "t1-b"), (0, 4, "t3-a")]),
        *lso({0: 6, 1: 4}),
        assign("ru-0"),
        poll([(0, 0, "t1-a"), (0, 1, "t2-a"), (1, 2, "t4-a")], READ_UNCOMMITTED, "ru-0"),
    ]


def clean_final() -> list[Event]:
    return [
        final(0, [(0, "t1-a"), (4, "t3-a")], READ_COMMITTED),
        final(1, [(0, "t1-b")], READ_COMMITTED),
        final(0, P0_LOG, READ_UNCOMMITTED),
        final(1, P1_LOG, READ_UNCOMMITTED),
        stable(0, 6, 6),
        stable(1, 4, 4),
    ]


def test_a_clean_history_is_valid():
    verdict = check_transactions([*clean_writes(), *clean_reads(), *clean_final()])
    assert verdict.ok, verdict.details()
    assert verdict.txns["committed"] == 1
    assert verdict.txns["aborted"] == 1
    assert verdict.txns["aborted-in-log"] == 1  # t2: aborts really reach the log
    assert verdict.txns["unknown"] == 2
    assert verdict.txns["unknown-committed"] == 1
    assert verdict.txns["unknown-aborted"] == 1
    assert verdict.reads[READ_COMMITTED] == 3
    assert verdict.stable_partitions == 2
    assert "VALID" in verdict.summary()


def only(verdict: txn_checker.TxnVerdict, anomaly: str) -> None:
    assert verdict.failures.keys() == {anomaly}, verdict.summary()
    assert verdict.details(), "each anomaly found comes with an example"


def test_an_aborted_write_read_committed_is_an_aborted_read():
    history = [*clean_writes(), *clean_reads(), poll([(0, 1, "t2-a")]), *clean_final()]
    only(check_transactions(history), txn_checker.ABORTED_READ)


def test_a_write_of_a_transaction_never_committed_read_committed_is_an_aborted_read():
    """A transaction its client meant to abort and died in: never asked to commit."""
    writes = [*clean_writes(), *txn("t5", [(1, "t5-a")], "pending", intent="abort")]
    history = [
        *writes,
        *clean_reads(),
        *clean_final()[:1],
        final(1, [(0, "t1-b"), (5, "t5-a")], READ_COMMITTED),
    ]
    only(check_transactions(history), txn_checker.ABORTED_READ)


def test_a_committed_write_missing_at_the_end_is_a_lost_commit():
    history = [*clean_writes(), *clean_reads(), *clean_final()]
    history[-6] = final(0, [(4, "t3-a")], READ_COMMITTED)  # t1-a gone
    verdict = check_transactions(history)
    assert verdict.counts[txn_checker.LOST_COMMIT] == 1
    assert "t1" in verdict.examples[txn_checker.LOST_COMMIT][0]


def test_part_of_a_transaction_read_past_the_rest_is_an_intermediate_read():
    """A read_committed reader saw t1's write on partition 1 and read partition 0 past t1's
    write there (up to t3-a at 4) without seeing it."""
    reads = [assign(), poll([(1, 0, "t1-b")]), poll([(0, 4, "t3-a")])]
    only(
        check_transactions([*clean_writes(), *reads, *clean_final()]),
        txn_checker.INTERMEDIATE_READ,
    )


def test_reading_part_of_a_transaction_before_reaching_the_rest_is_no_anomaly():
    reads = [assign(), poll([(1, 0, "t1-b")]), assign(), poll([(0, 4, "t3-a")])]
    assert check_transactions([*clean_writes(), *reads, *clean_final()]).ok


def test_a_value_read_committed_before_its_commit_was_asked_is_a_premature_read():
    invoke, completion = txn("t7", [(1, "t7-a")], "ok", offsets=[(1, 5, "t7-a")])
    history = [
        *clean_writes(),
        invoke,
        poll([(1, 5, "t7-a")]),  # read while t7 was still open
        event("producer-0", "invoke", "commit", {"txn": "t7"}),
        completion,
        *clean_reads(),
        *clean_final()[:1],
        final(1, [(0, "t1-b"), (5, "t7-a")], READ_COMMITTED),
        *clean_final()[2:],
    ]
    only(check_transactions(history), txn_checker.PREMATURE_READ)


def test_a_value_read_committed_after_its_commit_was_asked_is_no_anomaly():
    invoke, completion = txn("t7", [(1, "t7-a")], "ok", offsets=[(1, 5, "t7-a")])
    history = [
        *clean_writes(),
        invoke,
        event("producer-0", "invoke", "commit", {"txn": "t7"}),
        poll([(1, 5, "t7-a")], process="rc-1"),  # the commit may land before it answers
        completion,
        *clean_reads(),
        *clean_final()[:1],
        final(1, [(0, "t1-b"), (5, "t7-a")], READ_COMMITTED),
        *clean_final()[2:],
    ]
    assert check_transactions(history).ok


def test_an_unknown_transaction_half_visible_at_the_end_is_torn():
    writes = [*clean_writes(), *txn("t6", [(0, "t6-a"), (1, "t6-b")], "info")]
    history = [
        *writes,
        *clean_reads(),
        final(0, [(0, "t1-a"), (4, "t3-a"), (7, "t6-a")], READ_COMMITTED),
        *clean_final()[1:],
    ]
    only(check_transactions(history), txn_checker.TORN_TRANSACTION)


def test_a_value_at_two_offsets_is_a_duplicate():
    history = [
        *clean_writes(),
        *clean_reads(),
        poll([(0, 7, "t1-a")], READ_UNCOMMITTED, "ru-0"),
        *clean_final(),
    ]
    only(check_transactions(history), txn_checker.DUPLICATE)


def test_two_values_at_one_offset_are_inconsistent():
    history = [
        *clean_writes(),
        *clean_reads(),
        poll([(1, 2, "t1-b")], READ_UNCOMMITTED, "ru-0"),
        *clean_final(),
    ]
    verdict = check_transactions(history)
    assert verdict.counts[txn_checker.INCONSISTENT_OFFSETS] == 1, verdict.summary()


def test_a_value_nobody_wrote_is_a_phantom():
    history = [
        *clean_writes(),
        *clean_reads(),
        poll([(0, 9, "garbage")], READ_UNCOMMITTED, "ru-0"),
        *clean_final(),
    ]
    only(check_transactions(history), txn_checker.PHANTOM)


def test_a_last_stable_offset_going_back_is_nonmonotonic():
    history = [*clean_writes(), *clean_reads(), *lso({0: 3, 1: 4}, "rc-1"), *clean_final()]
    verdict = check_transactions(history)
    only(verdict, txn_checker.NONMONOTONIC_LSO)
    assert "6" in verdict.examples[txn_checker.NONMONOTONIC_LSO][0]


def test_overlapping_lso_observations_are_not_ordered():
    """Two observations in flight together may complete in either order."""
    history = [
        event("rc-0", "invoke", "lso", {}),
        event("rc-1", "invoke", "lso", {}),
        event("rc-1", "ok", "lso", {"offsets": {"0": 5}}),
        event("rc-0", "ok", "lso", {"offsets": {"0": 3}}),
    ]
    assert check_transactions(history).ok


def test_unstable_offsets_pinned_at_the_end_are_a_transaction_never_ending():
    history = [*clean_writes(), *clean_reads(), *clean_final()[:-1], stable(1, 2, 4)]
    only(check_transactions(history), txn_checker.TXN_NEVER_ENDING)


@pytest.mark.parametrize("anomaly", txn_checker.ANOMALIES)
def test_every_anomaly_class_is_named_in_the_summary(anomaly):
    assert anomaly in check_transactions([]).summary()
