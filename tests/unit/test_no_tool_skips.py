"""No test skips itself when a tool it needs is missing: `make test` installs Kafka's jars (and
kcat, kgo) before it runs, so a skip could only hide a broken install and turn a suite green
that tested nothing. A missing tool is a failure naming the make target that installs it."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# What says a tool is there (devtools.apache_kafka.installed, shutil.which for kcat or java).
TOOL_CHECKS = ("installed", "which", "KAFKA_JARS", "SPARK_KAFKA_JARS")


def _skips_on_a_tool(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = ast.unparse(node.func)
        if not called.endswith(("mark.skipif", "pytest.skip", "pytest.importorskip")):
            continue
        said = ast.unparse(node)
        if any(check in said for check in TOOL_CHECKS):
            lines.append(node.lineno)
    return lines


def test_no_test_module_skips_when_a_tool_is_missing():
    found = {
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in _skips_on_a_tool(ast.parse(path.read_text()))
    }
    assert found == set(), "fail instead (assert installed(), INSTALL_HINT): " + str(found)


def test_the_check_finds_a_skip_on_kafkas_jars():
    skipping = "pytestmark = pytest.mark.skipif(not installed(), reason='make kafka')\n"
    assert _skips_on_a_tool(ast.parse(skipping)) == [1]
