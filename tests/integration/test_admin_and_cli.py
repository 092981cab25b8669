"""Admin and the client-backed CLI commands (produce, consume --group, groups, perf) against
an in-process cluster, through `seglog.cli.main.main`."""

import importlib.metadata

import pytest

from seglog.cli.main import main
from seglog.client.admin import EARLIEST, LATEST, Admin, GroupOffset
from seglog.client.consumer import Consumer
from seglog.client.gateway import with_default_port
from seglog.client.producer import Producer
from seglog.client.structs import OffsetAndTimestamp, TopicPartition
from tests.authorizer_modes import AUTHORIZER_MODES
from tests.cluster import cli_in_process as run
from tests.cluster import drain

# Tests of admin and group calls run with the authorizer off and on (conftest's cluster).
BOTH_AUTHORIZER_MODES = pytest.mark.parametrize("cluster", AUTHORIZER_MODES, indirect=True)


@BOTH_AUTHORIZER_MODES
def test_admin_topics_offsets_groups_and_lag(cluster):
    with Admin(cluster.address) as admin:
        admin.create_topic("audit", 2, configs={"retention.ms": "3600000"})
        assert admin.list_topics() == ["audit"]
        with Producer(cluster.address) as producer:
            for i in range(10):
                producer.send("audit", b"%d" % i, partition=0, timestamp_ms=1000 + i)
        tp0, tp1 = TopicPartition("audit", 0), TopicPartition("audit", 1)
        assert admin.list_offsets({tp0: EARLIEST, tp1: LATEST, TopicPartition("audit", 0): 1004})[
            tp0
        ] == OffsetAndTimestamp(4, 1004)
        with Consumer(cluster.address, group_id="auditors", enable_auto_commit=False) as consumer:
            consumer.assign([tp0])
            consumer.commit({tp0: 6})
        assert [g.group_id for g in admin.list_groups()] == ["auditors"]
        assert admin.list_group_offsets("auditors") == {tp0: GroupOffset(6, 10, 4)}
        description = admin.describe_group("auditors")
        assert description.state == "Empty" and description.members == ()
        assert "__consumer_offsets" in admin.list_topics(include_internal=True)
        assert "__consumer_offsets" not in admin.list_topics()


@BOTH_AUTHORIZER_MODES
def test_cli_produce_consume_with_a_group_and_groups_describe(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("lines", 3)
    lines = b"".join(b"k%d:v%d\n" % (i % 5, i) for i in range(40))
    code, _, err = run(
        cluster, capsys, monkeypatch, "produce", "lines", "--key-separator", ":", stdin=lines
    )
    assert code == 0 and "Produced 40 records" in err
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        "lines",
        "--group",
        "readers",
        "--from-beginning",
        "--max-messages",
        "40",
        "--property",
        "heartbeat.interval.ms=100",
    )
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert sorted(r[4] for r in rows) == sorted(f"v{i}" for i in range(40))
    # The group committed what it read on close: a second run has nothing left.
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        "lines",
        "--group",
        "readers",
        "--timeout-ms",
        "300",
    )
    assert code == 0 and out == ""
    code, out, _ = run(cluster, capsys, monkeypatch, "groups", "list")
    assert out.split("\t")[0] == "readers"
    run(cluster, capsys, monkeypatch, "produce", "lines", "--partition", "2", stdin=b"late\n")
    code, out, _ = run(cluster, capsys, monkeypatch, "groups", "describe", "readers")
    assert code == 0 and "State: Empty" in out
    table = [line.split() for line in out.splitlines()[1:]]
    assert table[0][:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    lags = {int(row[1]): int(row[4]) for row in table[1:]}
    assert lags[2] == 1 and lags[0] == 0 and lags[1] == 0


def test_cli_perf_produce_and_consume_report_rates_and_latency(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("load", 2)
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        "perf",
        "produce",
        "load",
        "--num-records",
        "5000",
        "--record-size",
        "50",
        "--compression",
        "lz4",
    )
    assert code == 0
    assert out.startswith("5000 records sent, ") and "ms 99th" in out
    code, out, _ = run(
        cluster, capsys, monkeypatch, "perf", "consume", "load", "--messages", "5000"
    )
    first, summary = out.splitlines()
    assert code == 0 and first.startswith("first record after ")
    assert summary.startswith("5000 records consumed, ")
    assert "MB/sec" in summary and "ms 50th" in summary
    assert "record age at receipt, not end-to-end latency" in summary
    # Values differ from record to record, so lz4 has no repeats to remove.
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("load", 0)])
        values = [r.value for r in consumer.poll_records(timeout_ms=2000, max_records=500)]
    assert len(values) > 100 and len(set(values)) == len(values)


def test_cli_perf_produce_takes_values_from_a_payload_file(cluster, capsys, monkeypatch, tmp_path):
    cluster.admin.create_topic("lines", 1)
    (tmp_path / "payloads.txt").write_bytes(b"alpha\nbeta\n\ngamma\n")
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        "perf",
        "produce",
        "lines",
        "--num-records",
        "6",
        "--payload-file",
        str(tmp_path / "payloads.txt"),
    )
    assert code == 0 and out.startswith("6 records sent")
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("lines", 0)])
        values = [r.value for r in drain(consumer, 6)]
    assert values == [b"alpha", b"beta", b"gamma"] * 2


def test_the_bootstrap_option_goes_before_or_after_the_subcommand_with_kafkas_name(cluster, capsys):
    cluster.admin.create_topic("placed", 1)
    for argv in (
        ["--bootstrap-server", cluster.address, "topics", "list"],
        ["--bootstrap", cluster.address, "topics", "list"],
        ["topics", "list", "--bootstrap-server", cluster.address],
        ["--bootstrap", "127.0.0.1:1", "topics", "list", "--bootstrap", cluster.address],
    ):
        assert main(argv) == 0, argv
        assert "placed" in capsys.readouterr().out


def test_version_and_addresses_without_a_port(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"seglog {importlib.metadata.version('seglog')}"
    assert with_default_port("broker.example") == "broker.example:7070"
    assert with_default_port("10.0.0.5") == "10.0.0.5:7070"
    assert with_default_port("10.0.0.5:9000") == "10.0.0.5:9000"
    assert with_default_port("[::1]") == "[::1]:7070"
    assert with_default_port("[::1]:9000") == "[::1]:9000"
    assert with_default_port("unix:/run/seglog.sock") == "unix:/run/seglog.sock"


@BOTH_AUTHORIZER_MODES
def test_topics_describe_without_names_shows_user_topics(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("users", 2)
    with Consumer(cluster.address, group_id="g", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition("users", 0)])
        consumer.commit({TopicPartition("users", 0): 0})  # creates __consumer_offsets
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "describe")
    assert code == 0
    assert [line.split("\t")[0] for line in out.splitlines() if line.startswith("Topic:")] == [
        "Topic: users"
    ]
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "describe", "--include-internal")
    assert "Topic: __consumer_offsets" in out and "Topic: users" in out


def test_the_cli_pointed_at_a_storage_node_says_so(cluster, capsys):
    node_address = cluster.nodes[1].address
    assert main(["topics", "list", "--bootstrap", node_address]) == 1
    assert "is it a storage node's address" in capsys.readouterr().err
