"""The order `make test`'s two workers take the test files in (tests/conftest.py's hooks).

xdist's loadfile hands out whole files, by default the files with the most tests first; a file
of three minute-long tests then comes last and keeps one worker busy alone while the other has
nothing left (12:11 of which the last ~3 minutes on one worker). Longest first instead (the
classic longest-processing-time rule) ends both workers within about one short file of each
other: the seconds each file took are kept in tests/durations.json, refreshed from the JUnit
reports of a `make test` and a `make test-long` run, on a quiet machine, one after the other:

    python -m pytest -q -n 2 --dist loadfile -m 'not long' tests --junitxml=report.xml
    python -m pytest -q -n 2 --dist loadfile -m long tests --junitxml=long.xml
    python -m tests.scheduling report.xml long.xml

(a file with tests in both targets counts both: longest first then only starts it earlier).

A file not in the table (a new one) counts its tests times the table's median seconds per test.
The Spark files are one unit: each worker that runs one starts a Spark JVM of its own (a
session-scoped SparkSession, 30-60 s on two busy cores), one is enough.
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
# Files under these directories go to one worker together (a unit shares its session fixtures).
SHARED_UNITS = ("tests/spark/",)


def unit_of(nodeid: str) -> str:
    """The scheduling unit a test belongs to: its file, or the directory of SHARED_UNITS."""
    path = nodeid.split("::", 1)[0]
    return next((unit for unit in SHARED_UNITS if path.startswith(unit)), path)


def load_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def longest_first(items: list[pytest.Item], durations: dict[str, float]) -> None:
    """Reorder `items` in place, the units expected to take longest first; a unit's tests keep
    their order, next to each other (its module fixtures start once)."""
    tests = Counter(unit_of(item.nodeid) for item in items)
    files = Counter(item.nodeid.split("::", 1)[0] for item in items)
    per_test = [durations[f] / n for f, n in files.items() if durations.get(f) and n]
    median = statistics.median(per_test) if per_test else 1.0
    expected: Counter[str] = Counter()
    for path, count in files.items():
        expected[unit_of(path)] += durations.get(path, median * count)
    first_seen = {unit: index for index, unit in enumerate(dict.fromkeys(tests))}
    items.sort(key=lambda item: (-expected[unit_of(item.nodeid)], first_seen[unit_of(item.nodeid)]))


def make_scheduler(config: pytest.Config, log):
    """loadfile in the collection's order (longest_first made it), SHARED_UNITS as one unit;
    None for every other --dist mode (xdist's own then)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # keep longest_first's order, not most tests first
    return LongestFirst(config, log)


def durations_from_junit(*reports: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown) from JUnit XML reports, summed."""
    root = Path.cwd()
    seconds: Counter[str] = Counter()
    cases = [case for r in reports for case in ElementTree.parse(r).getroot().iter("testcase")]
    for case in cases:
        parts = (case.get("classname") or "").split(".")
        for end in range(len(parts), 0, -1):
            path = "/".join(parts[:end]) + ".py"
            if (root / path).exists():
                seconds[path] += float(case.get("time") or 0)
                break
    return {path: round(total, 1) for path, total in sorted(seconds.items())}


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m tests.scheduling JUNIT_REPORT.xml...", file=sys.stderr)
        return 2
    durations = durations_from_junit(*(Path(arg) for arg in argv))
    DURATIONS.write_text(json.dumps(durations, indent=0, sort_keys=True) + "\n")
    print(f"{len(durations)} files, {sum(durations.values()):.0f} s in all -> {DURATIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
