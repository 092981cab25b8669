"""The fault campaign's history checker (tests/faults/checker.py) on synthetic histories:
each anomaly class is detected, the ones a producer mode allows do not fail the verdict, and
a clean history is valid. Also the history files: written a flushed line at a time, merged
in time order, a torn last line skipped."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.faults import checker
from tests.faults.checker import Guarantees, check
from tests.faults.history import Event, HistoryWriter, read_history

_clock = itertools.count(1_000)


def event(process: str, type_: str, f: str, value: Any) -> Event:
    return Event(process, type_, f, value, next(_clock))


def acked(value: str, partition: int, offset: int, process: str = "producer-0") -> list[Event]:
    return [
        event(process, "invoke", "send", {"value": value, "key": "k0"}),
        event(
            process,
            "ok",
            "send",
            {"value": value, "key": "k0", "partition": partition, "offset": offset},
        ),
    ]


def unknown(value: str, process: str = "producer-0") -> list[Event]:
    return [
        event(process, "invoke", "send", {"value": value, "key": "k0"}),
        event(process, "info", "send", {"value": value, "key": "k0", "error": "timed out"}),
    ]


def failed(value: str, process: str = "producer-0") -> list[Event]:
    return [
        event(process, "invoke", "send", {"value": value, "key": "k0"}),
        event(process, "fail", "send", {"value": value, "key": "k0", "error": "refused"}),
    ]


def poll(records: list[tuple[int, int, str]], process: str = "consumer-0") -> Event:
    return event(process, "ok", "poll", {"records": [list(r) for r in records]})


def assign(partitions: list[int], process: str = "consumer-0") -> Event:
    return event(process, "ok", "assign", {"partitions": partitions, "generation": 1})


def final(partition: int, values: list[str]) -> Event:
    return event(
        "final-reader",
        "ok",
        "final-read",
        {
            "partition": partition,
            "records": [[offset, value] for offset, value in enumerate(values)],
            "end_offset": len(values),
        },
    )


def commit(offset: int, outcome: str = "ok", process: str = "consumer-0") -> list[Event]:
    value = {"group": "g", "offsets": {"0": offset}}
    return [event(process, "invoke", "commit", value), event(process, outcome, "commit", value)]


def clean_history() -> list[Event]:
    return [
        *acked("p-0", 0, 0),
        *acked("p-1", 0, 1),
        assign([0]),
        poll([(0, 0, "p-0")]),
        *commit(1),
        poll([(0, 1, "p-1")]),
        *commit(2),
        final(0, ["p-0", "p-1"]),
    ]


def only(verdict: checker.Verdict) -> dict[str, int]:
    return {name: count for name, count in verdict.counts.items() if count}


def test_a_clean_history_is_valid():
    verdict = check(clean_history())
    assert verdict.ok, verdict.summary()
    assert only(verdict) == {}
    assert verdict.sends["ok"] == 2
    assert verdict.reads == 2
    assert verdict.final_records == 2
    assert verdict.summary().startswith("VALID")


def test_an_acknowledged_write_missing_from_the_final_read_is_lost():
    verdict = check([*acked("p-0", 0, 0), *acked("p-1", 0, 1), final(0, ["p-0"])])
    assert only(verdict) == {checker.LOST_WRITE: 1}
    assert "p-1 acknowledged at 0/1, beyond the log end" in verdict.examples[checker.LOST_WRITE]
    assert not verdict.ok
    assert verdict.summary().startswith("INVALID")


def test_an_acknowledged_offset_holding_another_record_is_a_lost_write_and_a_wrong_ack():
    # The signature: the acknowledged offset holds another producer's record.
    verdict = check([*acked("p-0", 0, 0), *unknown("q-0", "producer-1"), final(0, ["q-0"])])
    assert only(verdict) == {checker.LOST_WRITE: 1, checker.WRONG_ACK: 1}
    assert verdict.examples[checker.LOST_WRITE] == ["p-0 acknowledged at 0/0, which holds q-0"]


def test_without_a_final_read_a_write_is_lost_once_a_read_passed_its_offset():
    never_passed = check([*acked("p-0", 0, 5), poll([(0, 4, "x")]), *unknown("x")])
    assert only(never_passed) == {}
    passed = check([*acked("p-0", 0, 5), *unknown("x"), poll([(0, 6, "x")])])
    assert only(passed) == {checker.LOST_WRITE: 1}


def test_a_value_at_two_offsets_is_a_duplicate():
    verdict = check([*acked("p-0", 0, 0), *unknown("p-1"), final(0, ["p-0", "p-1", "p-1"])])
    assert only(verdict) == {checker.DUPLICATE: 1}
    assert verdict.examples[checker.DUPLICATE] == ["p-1 at 0/1, 0/2"]


def test_unknown_sends_present_once_or_absent_are_fine_present_twice_a_duplicate():
    once = check([*unknown("p-0"), *unknown("p-1"), final(0, ["p-0"])])
    assert once.ok and only(once) == {}
    assert once.sends["info"] == 2
    assert once.sends["info-written"] == 1
    twice = check([*unknown("p-0"), final(0, ["p-0", "p-0"])])
    assert only(twice) == {checker.DUPLICATE: 1}
    assert not twice.ok


def test_a_send_whose_process_died_before_its_answer_counts_as_unknown():
    invoked_only = [event("producer-0", "invoke", "send", {"value": "p-0", "key": "k0"})]
    verdict = check([*invoked_only, final(0, ["p-0"])])
    assert verdict.ok
    assert verdict.sends["info"] == 1


def test_two_values_read_at_one_offset_are_inconsistent():
    verdict = check([*unknown("p-0"), *unknown("p-1"), poll([(0, 0, "p-0")]), final(0, ["p-1"])])
    assert verdict.counts[checker.INCONSISTENT_OFFSETS] == 1
    assert verdict.examples[checker.INCONSISTENT_OFFSETS] == ["0/0 read as ['p-0', 'p-1']"]
    assert not verdict.ok


def test_an_acknowledged_value_read_at_another_offset_is_a_wrong_ack():
    verdict = check([*unknown("x"), *acked("p-0", 0, 0), final(0, ["x", "p-0"])])
    assert only(verdict) == {checker.WRONG_ACK: 1}


def test_a_duplicate_that_includes_the_acknowledged_offset_is_no_wrong_ack():
    # Without idempotence a retry writes a second copy; the answer names one of them.
    verdict = check([*acked("p-0", 0, 1), final(0, ["p-0", "p-0"])], Guarantees(idempotent=False))
    assert only(verdict) == {checker.DUPLICATE: 1}
    assert verdict.ok


def test_reading_a_value_whose_send_failed_is_an_aborted_read():
    verdict = check([*failed("p-0"), final(0, ["p-0"])])
    assert only(verdict) == {checker.ABORTED_READ: 1}
    assert not verdict.ok


def test_reading_a_value_nobody_sent_is_a_phantom():
    verdict = check([*acked("p-0", 0, 0), final(0, ["p-0", "garbage"])])
    assert only(verdict) == {checker.PHANTOM: 1}


def test_a_producers_acknowledged_offsets_going_backwards_is_nonmonotonic():
    verdict = check([*acked("p-0", 0, 1), *acked("p-1", 0, 0), final(0, ["p-1", "p-0"])])
    assert only(verdict) == {checker.NONMONOTONIC_SEND: 1}
    # Another producer's offsets are not ordered against this one's.
    other = check(
        [*acked("p-0", 0, 1), *acked("q-0", 0, 0, "producer-1"), final(0, ["q-0", "p-0"])]
    )
    assert only(other) == {}


def test_a_consumer_reading_backwards_without_a_new_assignment_is_nonmonotonic():
    values = ["a", "b", "c"]
    sends = [e for v in values for e in unknown(v)]
    backwards = check(
        [
            *sends,
            assign([0]),
            poll([(0, 0, "a"), (0, 1, "b")]),
            poll([(0, 1, "b")]),
            final(0, values),
        ]
    )
    assert only(backwards) == {checker.NONMONOTONIC_POLL: 1}
    after_rebalance = check(
        [*sends, assign([0]), poll([(0, 0, "a"), (0, 1, "b")]), assign([0]), poll([(0, 1, "b")]),
         final(0, values)]
    )  # fmt: skip
    assert only(after_rebalance) == {}


def test_a_consumer_jumping_over_a_record_is_a_poll_skip():
    values = ["a", "b", "c"]
    sends = [e for v in values for e in unknown(v)]
    verdict = check(
        [*sends, assign([0]), poll([(0, 0, "a")]), poll([(0, 2, "c")]), final(0, values)]
    )
    assert only(verdict) == {checker.POLL_SKIP: 1}
    assert "skipping 1" in verdict.examples[checker.POLL_SKIP][0]


def test_a_group_offset_committed_lower_than_an_earlier_acknowledged_one_regresses():
    verdict = check([*commit(5), *commit(3, process="consumer-1")])
    assert only(verdict) == {checker.COMMIT_REGRESSION: 1}
    # A failed commit regresses nothing, and overlapping commits are not ordered.
    assert only(check([*commit(5), *commit(3, "fail")])) == {}
    overlapping = [
        event("consumer-0", "invoke", "commit", {"group": "g", "offsets": {"0": 5}}),
        event("consumer-1", "invoke", "commit", {"group": "g", "offsets": {"0": 3}}),
        event("consumer-0", "ok", "commit", {"group": "g", "offsets": {"0": 5}}),
        event("consumer-1", "ok", "commit", {"group": "g", "offsets": {"0": 3}}),
    ]
    assert only(check(overlapping)) == {}


def test_commit_regressions_are_per_partition_and_against_the_highest_earlier_commit():
    def commit_of(offsets: dict[str, int], process: str) -> list[Event]:
        value = {"group": "g", "offsets": offsets}
        return [event(process, "invoke", "commit", value), event(process, "ok", "commit", value)]

    verdict = check(
        [
            *commit_of({"0": 9, "1": 4}, "consumer-0"),
            *commit_of({"0": 5, "1": 7}, "consumer-0"),  # partition 0 back from 9 to 5
            *commit_of({"0": 9, "1": 7}, "consumer-1"),
            *commit_of({"1": 6}, "consumer-1"),  # partition 1 back from 7 to 6
        ]
    )
    assert verdict.counts[checker.COMMIT_REGRESSION] == 2
    assert verdict.examples[checker.COMMIT_REGRESSION] == [
        "group g partition 0: consumer-0 committed 9, then consumer-0 committed 5",
        "group g partition 1: consumer-0 committed 7, then consumer-1 committed 6",
    ]


def test_a_polled_record_the_final_log_no_longer_holds_vanished():
    verdict = check(
        [*unknown("a"), *unknown("b"), poll([(0, 0, "a"), (0, 1, "b")]), final(0, ["a"])]
    )
    assert only(verdict) == {checker.VANISHED: 1}


@pytest.mark.parametrize(
    ("mode", "allowed", "forbidden"),
    [
        ("acks1", [checker.LOST_WRITE, checker.WRONG_ACK], [checker.VANISHED]),
        ("plain", [checker.DUPLICATE, checker.NONMONOTONIC_SEND], [checker.LOST_WRITE]),
        ("idempotent", [], [checker.DUPLICATE, checker.LOST_WRITE]),
    ],
)
def test_anomalies_a_mode_allows_are_counted_but_do_not_fail(mode, allowed, forbidden):
    guarantees = Guarantees.for_producer_mode(mode)
    lossy = [*acked("p-0", 0, 0), *unknown("q-0", "producer-1"), final(0, ["q-0"])]
    duplicated = [*unknown("p-0"), final(0, ["p-0", "p-0"])]
    reordered = [*acked("p-0", 0, 1), *acked("p-1", 0, 0), final(0, ["p-1", "p-0"])]
    vanished = [*unknown("a"), poll([(0, 0, "a")]), final(0, [])]
    histories = {
        checker.LOST_WRITE: lossy,
        checker.DUPLICATE: duplicated,
        checker.NONMONOTONIC_SEND: reordered,
        checker.VANISHED: vanished,
    }
    for anomaly in allowed:
        verdict = check(histories.get(anomaly, lossy), guarantees)
        assert verdict.counts[anomaly] >= 1
        assert verdict.ok, verdict.summary()
        assert f"{anomaly} {verdict.counts[anomaly]} (allowed)" in verdict.summary()
    for anomaly in forbidden:
        verdict = check(histories[anomaly], guarantees)
        assert verdict.counts[anomaly] >= 1
        assert not verdict.ok


def test_examples_are_capped_while_counts_are_not():
    sends = [e for n in range(25) for e in acked(f"p-{n}", 0, n)]
    verdict = check([*sends, final(0, [])])
    assert verdict.counts[checker.LOST_WRITE] == 25
    assert len(verdict.examples[checker.LOST_WRITE]) == checker.EXAMPLES_PER_CLASS


def test_history_files_merge_in_time_order_and_a_torn_last_line_is_skipped(tmp_path):
    with (
        HistoryWriter(tmp_path, "producer-0") as producer,
        HistoryWriter(tmp_path, "consumer-0") as consumer,
    ):
        producer.record("invoke", "send", {"value": "producer-0-0", "key": "k0"})
        consumer.record("ok", "assign", {"partitions": [0], "generation": 1})
        producer.record(
            "ok", "send", {"value": "producer-0-0", "key": "k0", "partition": 0, "offset": 0}
        )
    with open(tmp_path / "producer-0.jsonl", "a") as file:
        file.write('{"process": "producer-0", "type": "inv')  # killed mid-line
    events = read_history(tmp_path)
    assert [(e.process, e.type, e.f) for e in events] == [
        ("producer-0", "invoke", "send"),
        ("consumer-0", "ok", "assign"),
        ("producer-0", "ok", "send"),
    ]
    assert events == sorted(events, key=lambda e: e.time_ns)
