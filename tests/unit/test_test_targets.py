"""`make test` and `make test-long` split the suite by the `long` marker: every test is in
exactly one of them, CI runs both, and a test that starts a whole `make run`, a fault campaign
or a benchmark's run is marked long unless KEPT below names it with the reason it stays in
`make test` (a feature's one test of that kind). Read from the Makefile as make runs it and
from the tests' source, so a new campaign cannot land in `make test` by forgetting the mark."""

from __future__ import annotations

import ast
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What a test calls that makes it a campaign or a whole process tree: make run's command
# (tests/cluster.py), the fault campaign's config (tests/faults/campaign.py), the
# benchmarks' run drivers (bench/latency_drivers.py, bench/scale.py, bench/scale_kafka.py,
# bench/transactions.py).
ENTRY_POINTS = {
    "local_cluster_command": "a whole make run",
    "CampaignConfig": "a fault campaign",
    "seglog_run": "a benchmark's run",
    "kafka_run": "a benchmark's run",
    "run_shape": "a benchmark's run",
    "kafka_creating_p99": "a benchmark's run",
    "compare_transactions": "a benchmark's run",
    "transactional_run": "a benchmark's run",
}

# Kept in make test on purpose: each a feature's test of that kind (file::function: why).
KEPT = {
    "tests/e2e/test_cli_and_make_run.py::test_ctrl_c_on_make_run_stops_the_nodes_before_the_"
    "gateway_quietly": "make run's stop (issue 57): its one whole make run in make test",
    "tests/e2e/test_monitoring.py::test_make_run_names_a_busy_scrape_port_and_the_setting_to_"
    "change": "make run refuses at once, before any server starts",
}


def _recipe_pytest(target: str) -> list[str]:
    """The pytest command line `make TARGET` runs, as make -n prints it."""
    shown = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), target],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (line,) = [line for line in shown.stdout.splitlines() if " -m pytest " in line]
    return shlex.split(line)


def _marker_expression(words: list[str]) -> tuple[str, list[str]]:
    """(the -m expression, the paths) of a pytest command line."""
    expression = words[words.index("-m", words.index("pytest")) + 1]
    paths = [w for w in words if w == "tests" or w.startswith("tests/")]
    return expression, paths


def test_make_test_and_make_test_long_select_complements_of_the_same_suite():
    fast, fast_paths = _marker_expression(_recipe_pytest("test"))
    long, long_paths = _marker_expression(_recipe_pytest("test-long"))
    assert (fast, long) == ("not long", "long")  # complements: each test in exactly one
    assert fast_paths == long_paths == ["tests"]


def test_ci_runs_make_test_and_then_make_test_long():
    script = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in script.splitlines()]
    assert 'make "$1"' in commands  # suite TARGET runs make TARGET, failing on a failure
    assert "suite test || exit" in commands and "suite test-long || exit" in commands
    assert commands.index("suite test || exit") < commands.index("suite test-long || exit")


def _marked_long(decorators: list[ast.expr]) -> bool:
    return any(ast.unparse(d).startswith("pytest.mark.long") for d in decorators)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _module_marked_long(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and "long" in _names(node.value)
        for node in tree.body
    )


def _unmarked_campaigns(path: Path) -> dict[str, str]:
    """Each test of the file that reaches an entry point (itself or through the file's
    fixtures) and is not marked long: its name and what it starts."""
    tree = ast.parse(path.read_text())
    if _module_marked_long(tree):
        return {}
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }

    def reaches(name: str, seen: frozenset[str] = frozenset()) -> str | None:
        function = functions[name]
        used = _names(function)
        for entry, what in ENTRY_POINTS.items():
            if entry in used:
                return what
        for argument in function.args.args:  # fixtures of the same file
            if argument.arg in functions and argument.arg not in seen:
                found = reaches(argument.arg, seen | {name})
                if found:
                    return found
        return None

    found = {}
    for name, function in functions.items():
        if name.startswith("test_") and not _marked_long(function.decorator_list):
            what = reaches(name)
            if what:
                found[name] = what
    return found


def test_every_campaign_and_whole_make_run_is_marked_long_or_kept_on_purpose():
    unmarked = {
        f"{path.relative_to(ROOT)}::{name}": what
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for name, what in _unmarked_campaigns(path).items()
    }
    forgotten = {test: what for test, what in unmarked.items() if test not in KEPT}
    assert not forgotten, (
        f"mark these @pytest.mark.long (make test-long's), or name them in KEPT with why "
        f"make test keeps them: {forgotten}"
    )
    assert not set(KEPT) - set(unmarked), "KEPT names a test that no longer needs it"
