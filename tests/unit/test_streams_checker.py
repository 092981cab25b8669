"""The streams campaign's checker (tests/faults/streams_checker.py) on histories made by hand:
exact counts are valid; a repeated or stepped-back count (double count), a skipped one (lost
update), two readers disagreeing at an offset, a final count off the input's, an acknowledged
line missing from the input and a line written twice are each found; a line written twice
across its producer's epoch bump is the writer's, counted twice and no anomaly."""

from __future__ import annotations

from tests.faults.history import Event
from tests.faults.streams_checker import check_streams


def event(process, type_, f, value, time_ns=0):
    return Event(process, type_, f, value, time_ns)


LINES = ((0, 0, "p-0", "a b a"), (1, 0, "p-1", "b"))


def history(polls, final_output, lines=LINES, acknowledged=("p-0",)):
    events = [event("producer-0", "ok", "line", {"line": line}) for line in acknowledged]
    events += [event(p, "ok", "poll", {"records": r}) for p, r in polls]
    events.append(event("final-read", "ok", "final-input", {"lines": [list(x) for x in lines]}))
    events.append(
        event("final-read", "ok", "final-output", {"records": final_output, "complete": True})
    )
    return events


EXACT = [[0, 0, "a", 1], [1, 0, "b", 1], [0, 1, "a", 2], [1, 1, "b", 2]]


def test_exact_counts_read_by_every_reader_are_valid():
    verdict = check_streams(history([("consumer-0", EXACT[:2]), ("consumer-1", EXACT)], EXACT))
    assert verdict.ok, verdict.details()
    assert (verdict.lines, verdict.counted, verdict.words, verdict.readers) == (2, 4, 2, 3)


def test_a_repeated_count_a_step_back_and_a_gap_are_found():
    # A record handed over again (offset 0 after 1) is no new count.
    redelivered = [*EXACT[:3], [0, 0, "a", 1], EXACT[3]]
    assert check_streams(history([("consumer-0", redelivered)], EXACT)).ok
    repeated = [*EXACT[:3], [0, 2, "a", 2]]
    verdict = check_streams(history([("consumer-0", repeated)], EXACT))
    assert set(verdict.anomalies) == {"double count"}, verdict.anomalies
    stepped_back = [[0, 0, "a", 1], [0, 1, "a", 2], [0, 2, "a", 1]]
    assert "double count" in check_streams(history([("consumer-0", stepped_back)], EXACT)).anomalies
    gap = [[0, 0, "a", 2]]
    assert set(check_streams(history([("consumer-0", gap)], EXACT)).anomalies) == {
        "lost update",
        "divergent read",  # offset 0 held a=1 for the final reader
    }


def test_a_final_count_off_the_input_and_lost_or_duplicate_lines_are_found():
    short = check_streams(history([], EXACT[:3]))
    assert set(short.anomalies) == {"wrong final count"}, short.anomalies
    lost = check_streams(history([], EXACT, acknowledged=("p-0", "p-9")))
    assert set(lost.anomalies) == {"lost line"}, lost.anomalies
    twice = check_streams(history([], EXACT, lines=((0, 0, "p-0", "a b a"), (1, 0, "p-0", "b"))))
    assert "duplicate line" in twice.anomalies


def test_an_incomplete_final_read_is_not_valid():
    events = history([], EXACT)
    events[-1] = event("final-read", "ok", "final-output", {"records": EXACT, "complete": False})
    verdict = check_streams(events)
    assert not verdict.anomalies and not verdict.ok
    assert not check_streams(events[:-2]).ok  # no final read at all


# "p-0" written at offsets 0@0 and 0@1, its words counted twice: a, b, a, a, b, a.
TWICE = ((0, 0, "p-0", "a b a"), (0, 1, "p-0", "a b a"))
TWICE_COUNTED = [[0, i, w, c] for i, (w, c) in enumerate(
    [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("b", 2), ("a", 4)]
)]  # fmt: skip


def written_twice(bumped_at_ns, output=TWICE_COUNTED):
    """producer-0 sent p-0 at 10 and learned its outcome at 20; its epoch bumped at
    `bumped_at_ns` (None: never)."""
    events = [
        event("producer-0", "invoke", "line", {"line": "p-0", "text": "a b a"}, 10),
        event("producer-0", "ok", "line", {"line": "p-0", "partition": 0, "offset": 1}, 20),
    ]
    if bumped_at_ns is not None:
        bump = {"phase": "bumped", "message": "bumped epoch to PID{Id:0,Epoch:1}"}
        events.append(event("producer-0", "info", "epoch-bump", bump, bumped_at_ns))
    return events + history([], output, lines=TWICE, acknowledged=())


def test_a_line_written_twice_across_its_producers_epoch_bump_is_the_writers():
    verdict = check_streams(written_twice(15))
    assert verdict.ok, verdict.details()
    assert verdict.epoch_bumps == 1 and len(verdict.writer_duplicates) == 1
    assert verdict.counted == 6  # both copies are input: counted, as the word count must
    # The word count counting the line once is short of the input as written.
    once = check_streams(written_twice(15, TWICE_COUNTED[:3]))
    assert set(once.anomalies) == {"wrong final count"}, once.anomalies


def test_a_line_written_twice_with_no_epoch_bump_while_outstanding_is_an_anomaly():
    for bumped_at_ns in (None, 5, 25):  # never, before the send, after the outcome
        verdict = check_streams(written_twice(bumped_at_ns))
        assert set(verdict.anomalies) == {"duplicate line"}, (bumped_at_ns, verdict.anomalies)
        assert not verdict.writer_duplicates
