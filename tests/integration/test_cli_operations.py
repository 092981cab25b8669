"""The CLI's admin operations against an in-process cluster, output checked exactly: group
offset resets and deletions, produce headers and files, consume output formats, adding
partitions, topic configs with their sources, and groups describe for partitions never
committed."""

import base64
import json

import pytest

from seglog.client.admin import Admin
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from tests.authorizer_modes import AUTHORIZER_MODES
from tests.batches import make_batch
from tests.cluster import cli_in_process as run
from tests.waiting import wait_until

# The group commands run with the authorizer off and on (conftest's cluster, GROUP_GRANTS).
BOTH_AUTHORIZER_MODES = pytest.mark.parametrize("cluster", AUTHORIZER_MODES, indirect=True)


@BOTH_AUTHORIZER_MODES
def test_groups_reset_offsets_dry_run_then_execute(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("ledger", 2)
    with Producer(cluster.address) as producer:
        for i in range(10):
            producer.send("ledger", b"%d" % i, partition=i % 2, timestamp_ms=1_700_000_000_000 + i)
    tp0, tp1 = TopicPartition("ledger", 0), TopicPartition("ledger", 1)
    with Admin(cluster.address) as admin:
        admin.alter_group_offsets("auditors", {tp0: 2, tp1: 3})

        def committed():
            return {tp: o.committed for tp, o in admin.list_group_offsets("auditors").items()}

        code, out, err = run(
            cluster,
            capsys,
            monkeypatch,
            "groups",
            "reset-offsets",
            "auditors",
            "--topic",
            "ledger",
            "--to-earliest",
        )
        assert code == 0 and "Dry run" in err
        assert out.splitlines() == [
            "GROUP     TOPIC   PARTITION  NEW-OFFSET",
            "auditors  ledger  0          0",
            "auditors  ledger  1          0",
        ]
        assert committed() == {tp0: 2, tp1: 3}  # a dry run changes nothing
        code, out, _ = run(
            cluster,
            capsys,
            monkeypatch,
            "groups",
            "reset-offsets",
            "auditors",
            "--topic",
            "ledger:1",
            "--shift-by",
            "10",
            "--execute",
        )
        assert code == 0 and out.splitlines()[1].split() == ["auditors", "ledger", "1", "5"]
        assert committed() == {tp0: 2, tp1: 5}  # clamped to the log end
        # The first record at or after 1_700_000_000_004 (written as offset 2 of partition 0).
        code, out, _ = run(
            cluster,
            capsys,
            monkeypatch,
            "groups",
            "reset-offsets",
            "auditors",
            "--all-topics",
            "--to-datetime",
            "2023-11-14T22:13:20.004+00:00",
            "--execute",
        )
        assert code == 0 and committed() == {tp0: 2, tp1: 2}
        with Consumer(cluster.address, group_id="auditors", session_timeout_ms=6000) as member:
            member.subscribe(["ledger"])
            assert wait_until(lambda: (member.poll(timeout_ms=50), member.assignment())[1])
            code, _, err = run(
                cluster,
                capsys,
                monkeypatch,
                "groups",
                "reset-offsets",
                "auditors",
                "--all-topics",
                "--to-latest",
                "--execute",
            )
            assert code == 1 and "active members" in err


@BOTH_AUTHORIZER_MODES
def test_groups_delete_and_delete_offsets(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("a", 2)
    cluster.admin.create_topic("b", 1)
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    with Admin(cluster.address) as admin:
        admin.alter_group_offsets("old", {a0: 0, a1: 0, b0: 0})
        code, out, _ = run(
            cluster, capsys, monkeypatch, "groups", "delete-offsets", "old", "--topic", "a:1"
        )
        assert code == 0 and out.strip() == "Deleted 1 committed offset of group old."
        assert set(admin.list_group_offsets("old")) == {a0, b0}
        with Consumer(cluster.address, group_id="old", session_timeout_ms=6000) as member:
            member.subscribe(["b"])
            assert wait_until(lambda: (member.poll(timeout_ms=50), member.assignment())[1])
            code, _, err = run(cluster, capsys, monkeypatch, "groups", "delete", "old")
            assert code == 1 and "NON_EMPTY_GROUP" in err
            code, _, err = run(
                cluster, capsys, monkeypatch, "groups", "delete-offsets", "old", "--topic", "b"
            )
            assert code == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in err
        assert wait_until(lambda: not admin.describe_group("old").members)
        code, out, _ = run(cluster, capsys, monkeypatch, "groups", "delete", "old")
        assert code == 0 and out.strip() == "Deleted group old."
        assert admin.list_group_offsets("old") == {}
        assert "old" not in [g.group_id for g in admin.list_groups()]
        code, _, err = run(cluster, capsys, monkeypatch, "groups", "delete", "old")
        assert code == 1 and "GROUP_ID_NOT_FOUND" in err
    cluster.restart_gateway()  # the deletion is in __consumer_offsets
    assert wait_until(lambda: len(cluster.admin.describe_cluster().nodes) == 3)
    assert cluster.gateway.offsets.committed("old") == {}
    assert cluster.gateway.offsets.group_metadata("old") is None


def test_produce_headers_and_files_and_consume_output_formats(
    cluster, capsys, monkeypatch, tmp_path
):
    cluster.admin.create_topic("fmt", 1)
    lines = b"trace:1,flag\tk1=a\tb\n" + b"\tk2=plain\n"
    code, _, err = run(
        cluster,
        capsys,
        monkeypatch,
        "produce",
        "fmt",
        "--parse-headers",
        "--key-separator",
        "=",
        "--header",
        "src=cli",
        stdin=lines,
    )
    assert code == 0 and "Produced 2 records" in err
    (tmp_path / "value.bin").write_bytes(b"\xff\x00binary\nvalue")
    (tmp_path / "key.txt").write_bytes(b"filekey")
    code, _, err = run(
        cluster,
        capsys,
        monkeypatch,
        "produce",
        "fmt",
        "--value-file",
        str(tmp_path / "value.bin"),
        "--key-file",
        str(tmp_path / "key.txt"),
    )
    assert code == 0 and "Produced 1 record to fmt." in err
    read = ("consume", "fmt", "--from-beginning", "--max-messages", "3")
    code, out, _ = run(cluster, capsys, monkeypatch, *read, "--print-headers")
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == 3 and all(len(row) == 6 for row in rows)  # the tab stayed escaped
    assert rows[0][3:] == ["k1", "a\\tb", "src=cli,trace=1,flag=null"]
    assert rows[1][3:] == ["k2", "plain", "src=cli"]
    assert rows[2][3:5] == ["filekey", "\\xff\x00binary\\nvalue"]
    code, out, _ = run(cluster, capsys, monkeypatch, *read, "--format", "%p/%o %k=%s (%K,%S)\\n")
    assert out.splitlines()[:2] == ["0/0 k1=a\tb (2,3)", "0/1 k2=plain (2,5)"]
    code, out, _ = run(cluster, capsys, monkeypatch, *read, "--json")
    first, _, third = (json.loads(line) for line in out.splitlines())
    assert first["value"] == "a\tb" and first["value_encoding"] == "utf-8"
    assert first["headers"][1:] == [
        {"key": "trace", "value": "1", "value_encoding": "utf-8"},
        {"key": "flag", "value": None, "value_encoding": None},
    ]
    assert third["value_encoding"] == "base64"
    assert base64.b64decode(third["value"]) == b"\xff\x00binary\nvalue"
    assert third["timestamp_type"] == "CreateTime" and third["offset"] == 2


def test_topics_alter_adds_partitions_and_keyed_records_follow_the_new_count(
    cluster, capsys, monkeypatch
):
    from seglog.client.partitioner import partition_for_key
    from seglog.errors import InvalidPartitionsError, InvalidTopicError

    cluster.admin.create_topic("growing", 2)
    code, out, _ = run(
        cluster, capsys, monkeypatch, "topics", "alter", "growing", "--partitions", "5"
    )
    assert code == 0 and "now has 5 partitions" in out
    with Admin(cluster.address) as admin:
        assert len(admin.describe_topics(["growing"])[0].partitions) == 5
        with pytest.raises(InvalidPartitionsError, match="can only grow"):
            admin.create_partitions("growing", 3)
        with pytest.raises(InvalidTopicError):
            admin.create_partitions("__consumer_offsets", 60)
    # Every new partition is served, and keyed records land at murmur2(key) % 5.
    keys = [b"key-%d" % i for i in range(40)]
    with Producer(cluster.address, linger_ms=0) as producer:
        metadata = [producer.send("growing", b"v", key=k).get(timeout=10) for k in keys]
    assert [m.partition for m in metadata] == [partition_for_key(k, 5) for k in keys]
    assert {m.partition for m in metadata} == set(range(5))


def test_configs_describe_with_sources_and_alter(tmp_path, capsys, monkeypatch):
    from seglog.errors import InvalidConfigError, InvalidTopicError
    from tests.cluster import LocalCluster

    cluster = LocalCluster(tmp_path, nodes=0)
    try:
        cluster.start_node(1, **{"log.retention.ms": "3600000"})  # the node's own default
        cluster.admin.create_topic("cfg", 1, configs={"segment.bytes": "1048576"})
        code, out, _ = run(cluster, capsys, monkeypatch, "configs", "describe", "--topic", "cfg")
        assert code == 0
        lines = dict(line.strip().split("\t") for line in out.splitlines()[1:])
        assert lines["segment.bytes=1048576"] == "source=topic"
        assert lines["retention.ms=3600000"] == "source=node"
        assert lines["cleanup.policy=delete"] == "source=default"
        code, out, _ = run(cluster, capsys, monkeypatch, "configs", "describe", "--cluster")
        assert code == 0
        sections = out.split("Configs for ")
        assert sections[1].startswith("gateway:")
        assert "  broker.session.timeout.ms=" in sections[1]
        assert "  offsets.retention.minutes=10080" in sections[1]
        assert sections[2].startswith("node 1:") and "  retention.ms=3600000" in sections[2]
        code, out, _ = run(
            cluster,
            capsys,
            monkeypatch,
            "configs",
            "alter",
            "--topic",
            "cfg",
            "--add-config",
            "retention.ms=60000,max.message.bytes=2000000",
            "--delete-config",
            "segment.bytes",
        )
        assert code == 0 and "Completed" in out
        with Admin(cluster.address) as admin:
            described = admin.describe_configs("cfg")
            assert described["retention.ms"] == ("60000", "topic")
            assert described["segment.bytes"][1] == "default"
            assert described["max.message.bytes"] == ("2000000", "topic")
            # The leader applies the new overrides to the open log.
            log = cluster.log("cfg", 0)
            assert wait_until(lambda: log.config.retention_ms == 60000)
            assert log.config.segment_bytes == 1024 * 1024 * 1024
            with pytest.raises(InvalidConfigError, match="retention.ms"):
                admin.alter_configs("cfg", {"retention.ms": "soon"})
            with pytest.raises(InvalidConfigError, match="unknown config"):
                admin.alter_configs("cfg", {}, ["no.such.config"])
            assert admin.describe_configs("cfg")["retention.ms"] == ("60000", "topic")
            with pytest.raises(InvalidTopicError):
                admin.alter_configs("__consumer_offsets", {"retention.ms": "1"})
        # A list value in brackets keeps its commas, as kafka-configs.sh takes it.
        code, _, _ = run(
            cluster,
            capsys,
            monkeypatch,
            "configs",
            "alter",
            "--topic",
            "cfg",
            "--add-config",
            "cleanup.policy=[compact,delete],retention.ms=70000",
        )
        assert code == 0
        with Admin(cluster.address) as admin:
            described = admin.describe_configs("cfg")
            assert described["cleanup.policy"] == ("compact,delete", "topic")
            assert described["retention.ms"] == ("70000", "topic")
    finally:
        cluster.close()


@BOTH_AUTHORIZER_MODES
def test_groups_describe_shows_a_dash_for_partitions_never_committed(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("half", 2)
    cluster.client.produce("half", {1: make_batch([b"x", b"y"])})
    with Consumer(cluster.address, group_id="half-readers", enable_auto_commit=False) as member:
        member.subscribe(["half"])
        assert wait_until(lambda: len((member.poll(timeout_ms=50), member.assignment())[1]) == 2)
        member.commit({TopicPartition("half", 0): 0})
        code, out, _ = run(cluster, capsys, monkeypatch, "groups", "describe", "half-readers")
    rows = {row[1]: row[2:5] for row in (line.split() for line in out.splitlines()[2:])}
    assert code == 0
    assert rows["0"] == ["0", "0", "0"]
    assert rows["1"] == ["-", "2", "-"]  # never committed: not 0, and its log end is shown
