"""make test's order of files (tests/scheduling.py): the longest first by the measured table,
a new file by its tests times the median per test, a file's tests together and in order, the
Spark files one unit; the table read back from a JUnit report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests import scheduling


@dataclass
class Collected:
    nodeid: str


def order(nodeids: list[str], durations: dict[str, float]) -> list[str]:
    items = [Collected(nodeid) for nodeid in nodeids]
    scheduling.longest_first(items, durations)  # type: ignore[arg-type]
    return [item.nodeid for item in items]


def test_the_longest_file_comes_first_and_keeps_its_tests_in_order():
    nodeids = [
        "tests/unit/test_a.py::test_1",
        "tests/unit/test_a.py::test_2",
        "tests/e2e/test_b.py::test_1",
        "tests/unit/test_c.py::test_1",
    ]
    durations = {
        "tests/unit/test_a.py": 2.0,
        "tests/e2e/test_b.py": 90.0,
        "tests/unit/test_c.py": 5,
    }
    assert order(nodeids, durations) == [
        "tests/e2e/test_b.py::test_1",
        "tests/unit/test_c.py::test_1",
        "tests/unit/test_a.py::test_1",
        "tests/unit/test_a.py::test_2",
    ]


def test_a_file_not_in_the_table_counts_its_tests_at_the_median_per_test():
    nodeids = [f"tests/integration/test_new.py::test_{i}" for i in range(4)] + [
        "tests/unit/test_a.py::test_1",
        "tests/unit/test_b.py::test_1",
        "tests/unit/test_c.py::test_1",
    ]
    # Median 3 s a test: the new file's 4 tests count 12 s, between 20 and 3.
    durations = {
        "tests/unit/test_a.py": 3.0,
        "tests/unit/test_b.py": 20.0,
        "tests/unit/test_c.py": 1,
    }
    assert [nodeid.split("::")[0] for nodeid in order(nodeids, durations)] == [
        "tests/unit/test_b.py",
        *["tests/integration/test_new.py"] * 4,
        "tests/unit/test_a.py",
        "tests/unit/test_c.py",
    ]


def test_the_spark_files_are_one_unit_ordered_by_their_sum():
    nodeids = [
        "tests/spark/test_read.py::test_1",
        "tests/integration/test_x.py::test_1",
        "tests/spark/test_write.py::test_1",
    ]
    durations = {
        "tests/spark/test_read.py": 30.0,
        "tests/spark/test_write.py": 30.0,
        "tests/integration/test_x.py": 50.0,
    }
    assert order(nodeids, durations) == [
        "tests/spark/test_read.py::test_1",
        "tests/spark/test_write.py::test_1",
        "tests/integration/test_x.py::test_1",
    ]
    assert scheduling.unit_of("tests/spark/test_write.py::test_1") == "tests/spark/"
    assert scheduling.unit_of("tests/e2e/test_b.py::test_1") == "tests/e2e/test_b.py"


def test_a_junit_report_gives_each_files_seconds_setup_and_teardown_included(tmp_path, monkeypatch):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_a.py").write_text("")
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_a" name="test_1" time="1.25"/>'
        '<testcase classname="tests.unit.test_a.TestGroup" name="test_2" time="2.5"/>'
        "</testsuite></testsuites>"
    )
    monkeypatch.chdir(tmp_path)
    assert scheduling.durations_from_junit(Path(report)) == {"tests/unit/test_a.py": 3.8}


def test_make_test_and_make_test_long_reports_add_up_per_file(tmp_path, monkeypatch):
    # A file with tests in both targets (tests marked long beside others) counts both runs.
    (tmp_path / "tests" / "e2e").mkdir(parents=True)
    (tmp_path / "tests" / "e2e" / "test_a.py").write_text("")
    reports = []
    for name, seconds in (("report.xml", "1.5"), ("long.xml", "30.25")):
        reports.append(tmp_path / name)
        reports[-1].write_text(
            '<testsuites><testsuite name="pytest">'
            f'<testcase classname="tests.e2e.test_a" name="test_{name}" time="{seconds}"/>'
            "</testsuite></testsuites>"
        )
    monkeypatch.chdir(tmp_path)
    assert scheduling.durations_from_junit(*reports) == {"tests/e2e/test_a.py": 31.8}
