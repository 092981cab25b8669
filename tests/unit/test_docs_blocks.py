"""Every code block of README.md and the docs/ guides is either run as written by a named test
or says here why it is not (issue 57: the guides' commands are run by tests in order, as the
first session is). A block added to a page fails this until it is given a test or a reason;
a test named here that no longer exists fails it too. (docs/reference/ is generated from the
code and checked by tests/unit/test_reference_pages.py.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^ *```(\w*)\n(.*?)^ *```", re.DOTALL | re.MULTILINE)
DOCS = "tests/integration/test_docs_commands.py"
MAKE_RUN = "tests/e2e/test_cli_and_make_run.py"
FIRST_SESSION = f"{MAKE_RUN}::test_every_command_of_the_readmes_first_session_returns_in_order"

# (page, the block's first line) -> the test that runs it as written.
RUN_BY = {
    ("README.md", '$ export PATH="$PWD/.venv/bin:$PATH"'): FIRST_SESSION,
    ("README.md", "$ seglog topics create greetings --partitions 3"): FIRST_SESSION,
    ("README.md", "$ printf 'alice:hello\\nbob:hi\\nalice:bye\\n' | seglog produce greetings"): (
        FIRST_SESSION
    ),
    ("README.md", "$ seglog consume greetings --from-beginning --max-messages 3"): FIRST_SESSION,
    ("README.md", "$ seglog consume greetings --group greeters --from-beginning"): FIRST_SESSION,
    ("README.md", "$ seglog topics describe greetings"): FIRST_SESSION,
    ("README.md", '$ java -cp ".cache/kafka/kafka/*" org.apache.kafka.tools.TopicCommand'): (
        FIRST_SESSION
    ),
    ("README.md", "$ seglog topics delete greetings"): FIRST_SESSION,
    ("docs/quickstart.md", "S=.venv/bin/seglog"): FIRST_SESSION,
    ("docs/python-clients.md", "from seglog.client import Admin, Consumer, Producer"): (
        FIRST_SESSION
    ),
    ("docs/python-clients.md", "from seglog.client import Consumer, ConsumerRebalanceListener"): (
        FIRST_SESSION
    ),
    ("docs/python-clients.md", "from seglog.client import Admin"): FIRST_SESSION,
    ("docs/python-clients.md", "from seglog.client import AcknowledgeType, Producer"): (
        "tests/integration/test_share_consumer.py::"
        "test_the_clients_guides_share_consumer_snippet_runs_as_written"
    ),
    ("docs/kafka-clients.md", "from confluent_kafka import Consumer, Producer"): FIRST_SESSION,
    ("docs/kafka-clients.md", 'kafka() { java -cp ".cache/kafka/kafka/*" "$@"; }'): (
        f"{DOCS}::test_the_kafka_tools_block_of_the_clients_guide_runs_as_written"
    ),
    ("docs/security.md", "$S acls add --allow-principal User:alice"): (
        f"{DOCS}::test_the_security_guides_acl_commands_run_in_order"
    ),
    ("docs/layout.md", "from seglog.records import RecordBatchBuilder, iter_records"): (
        f"{DOCS}::test_the_engine_snippet_of_the_layout_guide_runs_as_written"
    ),
    ("docs/operations.md", "seglog topics create orders --partitions 3 --if-not-exists"): (
        f"{DOCS}::test_the_operations_guides_moves_run_in_order_on_four_nodes"
    ),
    ("docs/differences-from-kafka.md", 'export PATH="$PWD/.venv/bin:$PATH"'): (
        f"{DOCS}::test_the_differences_pages_path_and_reset_lines_run_as_written"
    ),
    ("docs/differences-from-kafka.md", "rm -rf data"): (
        f"{DOCS}::test_the_differences_pages_path_and_reset_lines_run_as_written"
    ),
    ("docs/tiered-storage.md", "df = ("): (
        "tests/spark/test_tiered_read.py::"
        "test_the_tiered_guides_spark_snippet_reads_the_topic_from_the_store"
    ),
    ("docs/exactly-once.md", "from seglog.client import Consumer, Producer"): (
        f"{DOCS}::test_the_exactly_once_guides_grpc_snippet_commits_on_the_gateway"
    ),
    ("docs/exactly-once.md", "from confluent_kafka import Producer"): (
        f"{DOCS}::test_the_exactly_once_guides_snippet_commits_on_the_kafka_port"
    ),
    ("docs/services.md", ".venv/bin/seglog dump --topic orders --partition 0 --records"): (
        f"{DOCS}::test_the_services_guides_dump_lines_run_on_a_nodes_files"
    ),
    ("docs/spark.md", "from seglog.client import Admin"): (
        "tests/spark/test_write.py::test_the_readmes_spark_snippet_runs_as_written"
    ),
    ("docs/replication.md", "$S topics create payments --partitions 1"): (
        "tests/e2e/test_docs_failover.py::"
        "test_the_replication_guides_failover_block_runs_in_order_under_make_run"
    ),
}

# (page, the block's first line) -> why no test runs it as written.
NOT_RUN = {
    ("README.md", "make run      # a local cluster"): "the make targets' list; each is CI's",
    ("README.md", "$ make run"): "the first session's test starts the cluster itself",
    ("docs/development.md", "make run      # a local cluster"): "the make targets' list",
    ("docs/kubernetes.md", "docker build -t registry.example.com/seglog:0.1.0 ."): (
        "needs a registry and a Kubernetes cluster; make image-smoke plays the dev overlay "
        "with podman kube play instead (tests/kube_play_smoke.py)"
    ),
    ("docs/layout.md", "libs/seglog/records/"): "the source tree's layout, not commands",
    ("docs/replication.md", "make fault-campaign"): (
        "campaigns of minutes; make test-long runs short ones (tests/e2e/test_fault_campaign.py, "
        "test_tiered_fault_campaign.py)"
    ),
}


def blocks() -> list[tuple[str, str]]:
    """(page, first line) of every code block of README.md and docs/*.md."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for _language, body in BLOCK.findall(page.read_text()):
            first = next(line.strip() for line in body.splitlines() if line.strip())
            found.append((str(page.relative_to(ROOT)), first))
    return found


def _classified(page: str, first: str, table: dict[tuple[str, str], str]) -> str | None:
    # The table holds a prefix of the first line (long lines carry comments that may change).
    return next(
        (v for (p, start), v in table.items() if p == page and first.startswith(start)), None
    )


def test_every_block_is_run_by_a_test_or_says_why_not():
    unaccounted = [
        f"{page}: {first}"
        for page, first in blocks()
        if _classified(page, first, RUN_BY) is None and _classified(page, first, NOT_RUN) is None
    ]
    assert unaccounted == [], "give each a test (RUN_BY) or a reason (NOT_RUN)"


def test_every_test_named_exists_and_every_entry_still_names_a_block():
    shown = blocks()
    for (page, start), test in RUN_BY.items():
        path, function = test.split("::")
        assert f"def {function}(" in (ROOT / path).read_text(), test
        assert any(p == page and first.startswith(start) for p, first in shown), (page, start)
    for page, start in NOT_RUN:
        assert any(p == page and first.startswith(start) for p, first in shown), (page, start)
