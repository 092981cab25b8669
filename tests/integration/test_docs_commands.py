"""The docs' commands, run as written: on one shared cluster, the comparison with Kafka's tools
(docs/kafka-tools-comparison.md: each row's `seglog` command in this process, its exit status
as the row's status says: works 0, not supported refused), the clients guide's block of
Kafka's own tools and the security guide's ACL commands; on four nodes, the operations guide's
partition moves; with no cluster, the layout guide's engine snippet and the differences page's
PATH and reset lines. (README's first session and the quickstart:
tests/e2e/test_cli_and_make_run.py; the replication guide's failover under make run:
tests/e2e/test_docs_failover.py; the Spark guide: tests/spark/test_write.py; which block
of which page each test runs: tests/unit/test_docs_blocks.py.)"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from devtools import apache_kafka
from seglog.client import LATEST, TopicPartition
from tests.batches import make_batch
from tests.cluster import LocalCluster, cli_in_process
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "kafka-tools-comparison.md"
ROW = re.compile(r"^\| (kafka-[a-z-]+) \| (.*?) \| `([^`]+)` \| (works|not supported) \|(.*)\|$")


def comparison_rows() -> list[tuple[str, str, str, str]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        found = ROW.match(line)
        if found:
            tool, _kafka, seglog, status, note = found.groups()
            rows.append((tool, seglog, status, note))
    return rows


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    shared = LocalCluster(tmp_path_factory.mktemp("comparison"), nodes=1)
    shared.admin.create_topic("orders", 3)
    shared.client.produce("orders", {0: make_batch([b"a", b"b", b"c"])})
    yield shared
    shared.close()


def test_the_page_covers_each_tools_everyday_operations():
    tools = {row[0] for row in comparison_rows()}
    assert tools == {
        "kafka-topics",
        "kafka-configs",
        "kafka-console-producer",
        "kafka-console-consumer",
        "kafka-consumer-groups",
        "kafka-reassign-partitions",
    }
    for _tool, _seglog, status, note in comparison_rows():
        assert status == "works" or note.strip(), "a row that does not work says why"


def test_each_rows_status_is_what_seglog_does(cluster, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "producer.properties").write_text("acks=all\n")
    (tmp_path / "topics.json").write_text(
        json.dumps({"topics": [{"topic": "orders"}], "version": 1})
    )
    plan = {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [1]}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    # The group `billing` with a committed offset, as a reader of the page has it.
    code, _out, err = cli_in_process(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        "orders",
        "--group",
        "billing",
        "--from-beginning",
        "--max-messages",
        "1",
    )
    assert code == 0, err
    wrong = []
    for tool, seglog, status, _note in comparison_rows():
        stdin = b"k:v\n" if seglog.startswith("produce") else b""
        try:
            code, _out, err = cli_in_process(
                cluster, capsys, monkeypatch, *shlex.split(seglog), stdin=stdin
            )
        except SystemExit as refused:  # argparse refuses an unknown flag so
            code, err = refused.code, capsys.readouterr().err
        if (code == 0) != (status == "works"):
            wrong.append(f"{tool}: seglog {seglog}: exit {code}, page says {status}: {err[-300:]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.long  # the other guides' blocks stay in make test
@pytest.mark.slow
def test_the_kafka_tools_block_of_the_clients_guide_runs_as_written(cluster):
    # make test installs Kafka's jars first: missing, this fails rather than skips.
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    # docs/kafka-clients.md's "Kafka's own tools": each of Kafka's tools run from
    # .cache/kafka, in order, on this cluster's Kafka port; each must succeed.
    page = (ROOT / "docs" / "kafka-clients.md").read_text()
    block = page.split("## Kafka's own tools\n", 1)[1].split("```", 2)[1]
    script = "set -euo pipefail\n" + block.replace("127.0.0.1:9092", cluster.kafka_address)
    ran = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr.decode()[-3000:]
    printed = ran.stdout.decode()
    # --list names the topic; ConfigCommand describes it; the console consumer printed a record.
    assert "orders\n" in printed and "Dynamic configs for topic orders" in printed, printed


def test_the_security_guides_acl_commands_run_in_order(cluster, capsys, monkeypatch):
    # docs/security.md's ACL block, each `$S ...` line in order in this process (a CLI
    # process per line costs ~2 s on two busy cores) on the shared cluster: each must
    # succeed, and the listing shows bob's two grants.
    text = (ROOT / "docs" / "security.md").read_text()
    block = "$S acls add" + text.split("$S acls add", 1)[1].split("```", 1)[0]
    printed = ""
    for line in block.splitlines():
        code, out, err = cli_in_process(
            cluster, capsys, monkeypatch, *shlex.split(line[3:], comments=True)
        )
        assert code == 0, (line, err)
        printed += out
    assert printed.count("User:bob") >= 2, printed


def test_the_engine_snippet_of_the_layout_guide_runs_as_written(tmp_path):
    # docs/layout.md's "Using the engine": a log opened in a fresh directory, one record
    # appended and read back.
    (snippet,) = re.findall(
        r"```python\n(.*?)```", (ROOT / "docs" / "layout.md").read_text(), re.DOTALL
    )
    ran = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr.decode()[-3000:]
    assert ran.stdout.decode() == "0 b'key' b'value'\n", ran.stdout


@pytest.mark.slow  # a cluster of four nodes and a replica's copy
def test_the_operations_guides_moves_run_in_order_on_four_nodes(
    tmp_path, capsys, monkeypatch, caplog
):
    # docs/operations.md's "Moving partitions" block, each line in order as a reader runs it
    # on `make run NODES=4` (the plan moves onto node 4, which a default make run lacks): the
    # `echo`s write the plan files, each `seglog` line must succeed; --verify is retried, as
    # the page says it exits 0 once the move is done. A move the operator asked for warns of
    # nothing (node 1's replica, moved away, was logged as a `-stray` WARNING: issue 57).
    caplog.set_level(logging.WARNING)
    text = (ROOT / "docs" / "operations.md").read_text()
    block = text.split("**Moving partitions**", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    four = LocalCluster(tmp_path / "cluster", nodes=4)
    monkeypatch.chdir(tmp_path)
    try:
        for line in block.splitlines():
            if line.startswith("echo "):
                subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True, timeout=30)
                continue
            assert line.startswith("seglog "), line
            argv = shlex.split(line.removeprefix("seglog "), comments=True)

            def runs(argv: list[str] = argv) -> tuple[int, str, str]:
                return cli_in_process(four, capsys, monkeypatch, *argv)

            if "--verify" in argv:
                assert wait_until(lambda: runs()[0] == 0, timeout_s=60), (line, runs())
                moved = four.admin.describe_topic("orders").partitions[0]
                assert sorted(moved.replicas) == [2, 3, 4], moved
                continue
            code, out, err = runs()
            assert code == 0, (line, out, err)
            if "--generate" in argv:
                assert "Proposed partition reassignment configuration" in out, out
    finally:
        four.close()
    loud = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("services", "seglog"))
    ]
    assert loud == []


def test_the_differences_pages_path_and_reset_lines_run_as_written(tmp_path):
    # docs/differences-from-kafka.md: putting `seglog` on the PATH (from the repository root)
    # and starting afresh (`rm -rf data`, in a directory holding a run's data).
    path_block, reset_block = re.findall(
        r"```\n(.*?)```", (ROOT / "docs" / "differences-from-kafka.md").read_text(), re.DOTALL
    )
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no seglog on it until the export
    ran = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + path_block],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0 and re.match(r"seglog \d", ran.stdout), (ran.stdout, ran.stderr)
    (tmp_path / "data" / "node-1").mkdir(parents=True)
    subprocess.run(["bash", "-c", reset_block], cwd=tmp_path, check=True, timeout=30)
    assert not (tmp_path / "data").exists()


def test_the_exactly_once_guides_snippet_commits_on_the_kafka_port(cluster):
    # docs/exactly-once.md's transactional producer, on the shared cluster's Kafka port: it
    # must run as written, and its record and COMMIT marker land in `orders`.
    snippet = _python_block("exactly-once.md", "from confluent_kafka import Producer")
    ends = cluster.admin.list_offsets({TopicPartition("orders", p): LATEST for p in range(3)})
    before = sum(r.offset for r in ends.values())
    ran = subprocess.run(
        [sys.executable, "-c", snippet.replace("127.0.0.1:9092", cluster.kafka_address)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    ends = cluster.admin.list_offsets({TopicPartition("orders", p): LATEST for p in range(3)})
    assert sum(r.offset for r in ends.values()) == before + 2  # the record and its marker


def _python_block(page: str, first_line: str) -> str:
    """The python block of docs/`page` that begins with `first_line`."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text(), re.DOTALL)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


def test_the_exactly_once_guides_grpc_snippet_commits_on_the_gateway(cluster):
    # docs/exactly-once.md's seglog Producer over gRPC, on the shared cluster's gateway: it
    # must run as written and write its record and COMMIT marker to `invoices`.
    if "invoices" not in cluster.admin.list_topics():
        cluster.admin.create_topic("invoices", 1)
    snippet = _python_block("exactly-once.md", "from seglog.client import Consumer, Producer")
    ran = subprocess.run(
        [sys.executable, "-c", snippet.replace("127.0.0.1:7070", cluster.address)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    (end,) = cluster.admin.list_offsets({TopicPartition("invoices", 0): LATEST}).values()
    assert end.offset == 2  # the record and its marker


def test_the_services_guides_dump_lines_run_on_a_nodes_files(cluster, tmp_path):
    # docs/services.md's `seglog dump` lines, in order, from a directory whose `data` is the
    # shared cluster's (as make run's ./data): each must succeed, the records printed, the
    # --verify line passing on the node's live files.
    text = (ROOT / "docs" / "services.md").read_text()
    block = ".venv/bin/seglog dump" + text.split(".venv/bin/seglog dump", 1)[1].split("```")[0]
    (tmp_path / "data").symlink_to(cluster.root)
    seglog = str(Path(sys.executable).with_name("seglog"))
    printed = ""
    for line in block.splitlines():
        ran = subprocess.run(
            ["bash", "-c", line.replace(".venv/bin/seglog", seglog)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert ran.returncode == 0, (line, ran.stdout[-2000:], ran.stderr[-2000:])
        printed += ran.stdout
    # The first line's records (the fixture's a, b, c), then each line's files.
    assert "| offset: 2 timestamp:" in printed and "value: c headers" in printed, printed
    assert printed.count("Dumping data/node-1/orders-0/00000000000000000000.log") == 3, printed
