"""The side-by-side table of `make conformance`: one row per kgo test (and per subtest whose
results differ between the sides, or that is expected to fail), its result on each side and
the verdict:

    ok         passes on both (or Kafka skips it and seglog passes)
    FAIL       Kafka passes it, seglog does not (or only on a second try Kafka did not need),
               and it is not expected to fail
    expected   seglog fails or skips it for a feature it does not have yet (the note says which)
    drop?      expected to fail, yet passes on seglog: take it off the list
    skipped    skipped on both (e.g. SCRAM without KGO_TEST_SCRAM)
    n/c        not counted: Kafka fails it
(with seglog alone, a seglog failure that is not expected is a FAIL)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TextIO

from .conformance_kgo import KgoResult, Run

NOTE_WIDTH = 110


@dataclass
class Row:
    name: str
    depth: int
    kafka: str  # pass | fail | skip | "" (not run)
    kafka_s: float
    seglog: str
    seglog_s: float
    verdict: str
    note: str
    seglog_reason: str
    kafka_reason: str
    kafka_attempts: int = 1
    seglog_attempts: int = 1

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def verdict(kafka: str, seglog: str, expected: str | None) -> str:
    if not seglog:
        return {"pass": "ok", "skip": "skipped"}.get(kafka, "n/c")
    if not kafka:  # seglog alone (--only seglog): judged as if Kafka passed
        if seglog == "pass":
            return "ok"
        return "expected" if expected else ("skipped" if seglog == "skip" else "FAIL")
    if kafka == "fail":
        return "n/c"
    if seglog == "pass":
        return "drop?" if expected and kafka == "pass" else "ok"
    if expected:
        return "expected"
    if kafka == "skip":
        return "skipped" if seglog == "skip" else "n/c"
    return "FAIL"


def _names(test: str, *runs: Run | None) -> list[str]:
    """The test, then its subtests in the order either side first reported them."""
    names = [test]
    for run in runs:
        if run is not None:
            names += [name for name in run.results if name not in names]
    return names


def rows_of(
    tests: Sequence[str],
    kafka: dict[str, Run],
    seglog: dict[str, Run],
    expected_reason: Callable[[str], str | None],
) -> list[Row]:
    rows: list[Row] = []
    empty = KgoResult("", "", 0.0)
    for test in tests:
        kafka_run, seglog_run = kafka.get(test), seglog.get(test)
        subrows: list[Row] = []
        for name in _names(test, kafka_run, seglog_run):
            k = kafka_run.results.get(name, empty) if kafka_run else empty
            s = seglog_run.results.get(name, empty) if seglog_run else empty
            expected = expected_reason(name)
            row = Row(
                name=name,
                depth=name.count("/"),
                kafka=k.action,
                kafka_s=k.elapsed_s,
                seglog=s.action,
                seglog_s=s.elapsed_s,
                verdict=verdict(k.action, s.action, expected),
                note="",
                seglog_reason=s.reason() if s.action in ("fail", "skip") else "",
                kafka_reason=k.reason() if k.action in ("fail", "skip") else "",
                kafka_attempts=kafka_run.attempts if kafka_run else 0,
                seglog_attempts=seglog_run.attempts if seglog_run else 0,
            )
            if row.verdict != "ok":
                row.note = expected or row.seglog_reason or f"Kafka: {row.kafka_reason}"
            if name == test:
                top = row
            elif row.verdict != "ok" or k.action != s.action:
                subrows.append(row)
        # A parent that failed through its subtests says which, rather than its own last line.
        top.kafka_reason = _through_subtests(kafka_run) or top.kafka_reason
        top.seglog_reason = _through_subtests(seglog_run) or top.seglog_reason
        if top.verdict != "ok":
            top.note = expected_reason(test) or top.seglog_reason or f"Kafka: {top.kafka_reason}"
        # seglog passing only on a try Kafka did not need is no pass (order or load decided).
        if (
            top.verdict == "ok"
            and seglog_run is not None
            and seglog_run.attempts > max(1, kafka_run.attempts if kafka_run else 1)
        ):
            top.verdict = "FAIL"
            top.seglog_reason = f"passed on try {seglog_run.attempts} only; try 1: " + (
                seglog_run.earlier_failure
            )
            top.note = top.seglog_reason
        # A parent failing only through subtests expected to fail is expected too.
        failed = [r for r in subrows if r.seglog == "fail"]
        if top.verdict == "FAIL" and failed and all(r.verdict == "expected" for r in failed):
            top.verdict, top.note = "expected", failed[0].note
        rows += [top, *subrows]
    return rows


def _through_subtests(run: Run | None) -> str:
    if run is None or run.results[run.test].action != "fail":
        return ""
    failed = [r for name, r in run.results.items() if name != run.test and r.action == "fail"]
    # Only the innermost: a parent subtest fails with its child.
    leaves = [r for r in failed if not any(o.name.startswith(r.name + "/") for o in failed)]
    if not leaves:
        return ""
    names = ", ".join(r.name.split("/", 1)[1] for r in leaves)
    return f"{names} failed: {leaves[0].reason()}"


def _cell(action: str, seconds: float, attempts: int) -> str:
    if not action:
        return "-"
    label = "FAIL" if action == "fail" else action
    again = f" (try {attempts})" if attempts > 1 else ""
    return (f"{label} {seconds:.1f}s" if action != "skip" else "skip") + again


def print_table(rows: Sequence[Row], out: TextIO) -> None:
    cells = [
        (
            "  " + row.name.split("/", 1)[1] if row.depth else row.name,
            _cell(row.kafka, row.kafka_s, row.kafka_attempts),
            _cell(row.seglog, row.seglog_s, row.seglog_attempts),
            row.verdict,
            row.note[:NOTE_WIDTH],
        )
        for row in rows
    ]
    header = ("test", "kafka", "seglog", "verdict", "note")
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(4)]
    for line in [header, *cells]:
        out.write(
            "  ".join(text.ljust(width) for text, width in zip(line[:4], widths, strict=True))
            + f"  {line[4]}".rstrip()
            + "\n"
        )
    counts: dict[str, int] = {}
    for row in rows:
        if row.depth == 0:
            counts[row.verdict] = counts.get(row.verdict, 0) + 1
    summary = ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))
    out.write(f"\n{sum(counts.values())} tests: {summary}\n")
