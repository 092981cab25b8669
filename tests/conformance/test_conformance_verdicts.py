"""`make conformance`'s judgement without a cluster: which side-by-side results fail the run,
and that every test it expects to fail names a kgo test that exists at the pinned version
(a franz-go bump that renames one must not leave a stale exemption behind)."""

from __future__ import annotations

import pytest

from devtools import conformance, conformance_kgo
from devtools.conformance_kgo import KgoResult, Run
from devtools.conformance_report import rows_of, verdict


@pytest.mark.parametrize(
    ("kafka", "seglog", "expected", "judged"),
    [
        ("pass", "pass", None, "ok"),
        ("pass", "fail", None, "FAIL"),
        ("pass", "skip", None, "FAIL"),  # seglog not advertising what Kafka has is a failure
        ("pass", "fail", "issue 54", "expected"),
        ("pass", "skip", "issue 55", "expected"),
        ("pass", "pass", "issue 55", "drop?"),
        ("fail", "fail", None, "n/c"),
        ("skip", "skip", None, "skipped"),
        ("skip", "pass", None, "ok"),
        ("", "fail", None, "FAIL"),  # seglog alone
        ("", "fail", "issue 54", "expected"),
        ("pass", "", None, "ok"),  # Kafka alone
        ("fail", "", None, "n/c"),
    ],
)
def test_verdict(kafka, seglog, expected, judged):
    assert verdict(kafka, seglog, expected) == judged


def run_of(test: str, **actions: str) -> Run:
    return Run(test, {name: KgoResult(name, action, 1.0) for name, action in actions.items()}, 1)


def _range_848_expected(name: str) -> str | None:
    """An EXPECTED of one subtest (the real list changes as features land)."""
    return "a feature not built yet" if name.startswith("TestGroupETL/range/848") else None


def test_a_parent_failing_only_through_expected_subtests_is_expected():
    kafka = {
        "TestGroupETL": run_of(
            "TestGroupETL",
            TestGroupETL="pass",
            **{"TestGroupETL/range": "pass", "TestGroupETL/range/848": "pass"},
        )
    }
    seglog = {
        "TestGroupETL": run_of(
            "TestGroupETL",
            TestGroupETL="fail",
            **{"TestGroupETL/range": "pass", "TestGroupETL/range/848": "fail"},
        )
    }
    rows = rows_of(["TestGroupETL"], kafka, seglog, _range_848_expected)
    assert [(row.name, row.verdict) for row in rows] == [
        ("TestGroupETL", "expected"),
        ("TestGroupETL/range/848", "expected"),
    ]
    seglog["TestGroupETL"].results["TestGroupETL/range"].action = "fail"
    rows = rows_of(["TestGroupETL"], kafka, seglog, _range_848_expected)
    assert rows[0].verdict == "FAIL"


def test_expected_failures_name_kgo_tests_of_the_pinned_version():
    # make test builds kgo first (its prerequisite): missing, it is a failure, not a skip.
    assert conformance_kgo.built(), conformance_kgo.INSTALL_HINT
    tests = set(conformance_kgo.integration_tests())
    assert {"TestGroupETL", "TestTxnEtl", "TestIssue325"} <= tests
    assert "TestParseBrokerAddr" not in tests  # a unit test: it never dials
    for name in conformance.EXPECTED:
        assert name.split("/")[0] in tests, name


def test_seglog_passing_only_on_a_try_kafka_did_not_need_fails():
    kafka = {"TestConsumeRegex": run_of("TestConsumeRegex", TestConsumeRegex="pass")}
    seglog = {"TestConsumeRegex": run_of("TestConsumeRegex", TestConsumeRegex="pass")}
    seglog["TestConsumeRegex"].attempts = 2
    seglog["TestConsumeRegex"].earlier_failure = "topic __consumer_offsets is not in metadata"
    [row] = rows_of(["TestConsumeRegex"], kafka, seglog, conformance.expected_reason)
    assert row.verdict == "FAIL"
    assert "try 1: topic __consumer_offsets" in row.note
    kafka["TestConsumeRegex"].attempts = 2  # Kafka needed it too: the same footing
    [row] = rows_of(["TestConsumeRegex"], kafka, seglog, conformance.expected_reason)
    assert row.verdict == "ok"
