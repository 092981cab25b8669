"""The CLI frictions a Kafka team meets first, each reproduced against one in-process cluster
shared by the module: Kafka's everyday flags (topics create --if-not-exists / delete
--if-exists / describe's partition filters, consume --offset earliest|latest|N|-N, -e,
--include, the formatter's --property print.*, groups describe --members / --state /
--all-groups), a mistyped flag reported with the subcommand's usage, cluster configs printed
without Python reprs, and `dump --verify` on a node's real files of an empty partition."""

from __future__ import annotations

import os

import pytest

from seglog.cli.main import main
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from tests.cluster import LocalCluster
from tests.cluster import cli_in_process as run
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("cli-frictions"), nodes=3)
    yield c
    c.close()


@pytest.fixture(scope="module")
def keyed(cluster):
    """Topic `keyed`: partition 0 holds k0..k4 -> v0..v4, partition 1 holds k5..k6."""
    cluster.admin.create_topic("keyed", 2)
    with Producer(cluster.address) as producer:
        for i in range(7):
            producer.send(
                "keyed",
                b"v%d" % i,
                key=b"k%d" % i,
                partition=0 if i < 5 else 1,
                timestamp_ms=1000 + i,
            )
    return "keyed"


def test_create_if_not_exists_and_delete_if_exists_succeed_quietly(cluster, capsys, monkeypatch):
    assert run(cluster, capsys, monkeypatch, "topics", "create", "twice")[0] == 0
    code, _, err = run(cluster, capsys, monkeypatch, "topics", "create", "twice")
    assert code == 1 and "TOPIC_ALREADY_EXISTS" in err  # the friction: scripts had to guard
    code, out, err = run(
        cluster, capsys, monkeypatch, "topics", "create", "twice", "--if-not-exists"
    )
    assert (code, out, err) == (0, "", "")
    assert run(cluster, capsys, monkeypatch, "topics", "delete", "twice")[0] == 0
    code, _, err = run(cluster, capsys, monkeypatch, "topics", "delete", "twice")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, out, err = run(cluster, capsys, monkeypatch, "topics", "delete", "twice", "--if-exists")
    assert (code, out, err) == (0, "", "")
    assert "twice" not in cluster.admin.list_topics()


def test_consume_offset_forms_and_exit_at_end(cluster, keyed, capsys, monkeypatch):
    def offsets(*flags):
        code, out, _ = run(cluster, capsys, monkeypatch, "consume", keyed, "-e", *flags)
        assert code == 0
        return [tuple(int(f) for f in line.split("\t")[:2]) for line in out.splitlines()]

    # -N: N records before each partition's end; -e ends once both ends are reached.
    assert sorted(offsets("--offset", "-2")) == [(0, 3), (0, 4), (1, 0), (1, 1)]
    assert sorted(offsets("--offset", "-1", "--partition", "0")) == [(0, 4)]
    assert len(offsets("--offset", "earliest")) == 7
    assert offsets("--offset", "latest") == []  # at the end already: exits at once
    assert sorted(offsets("--offset", "3", "--partition", "0")) == [(0, 3), (0, 4)]
    # More than a partition holds: from its start.
    assert sorted(offsets("--offset", "-100", "--partition", "1")) == [(1, 0), (1, 1)]
    with pytest.raises(SystemExit) as exited:
        run(cluster, capsys, monkeypatch, "consume", keyed, "--offset", "first")
    assert exited.value.code == 2 and "expected earliest, latest" in capsys.readouterr().err


def test_consume_prints_kafka_console_consumer_properties(cluster, keyed, capsys, monkeypatch):
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        keyed,
        "--partition",
        "1",
        "--offset",
        "earliest",
        "-e",
        "--property",
        "print.key=true",
        "--property",
        "print.timestamp=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "key.separator= | ",  # kept as given, spaces included
    )
    assert code == 0
    assert out.splitlines() == [
        "CreateTime:1005 | Partition:1 | Offset:0 | k5 | v5",
        "CreateTime:1006 | Partition:1 | Offset:1 | k6 | v6",
    ]
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        keyed,
        "--from-beginning",
        "-e",
        "--property",
        "print.key=true",
        "--property",
        "print.value=false",
        "--property",
        "fetch.max.wait.ms=100",  # still a consumer setting
    )
    assert code == 0 and sorted(out.splitlines()) == [f"k{i}" for i in range(7)]


def test_consume_include_reads_every_matching_topic(cluster, keyed, capsys, monkeypatch):
    cluster.admin.create_topic("logs-a", 1)
    cluster.admin.create_topic("logs-b", 1)
    cluster.admin.create_topic("other-logs", 1)
    with Producer(cluster.address) as producer:
        for topic in ("logs-a", "logs-b", "other-logs"):
            producer.send(topic, topic.encode())
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        "--include",
        "logs-.*",
        "--offset",
        "earliest",
        "-e",
    )
    assert code == 0 and sorted(line.split("\t")[4] for line in out.splitlines()) == [
        "logs-a",
        "logs-b",
    ]
    # In a group too (subscribed to the topics matched when it starts).
    code, out, _ = run(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        "--include",
        "logs-.*",
        "--group",
        "regex-readers",
        "--from-beginning",
        "-e",
    )
    assert code == 0 and len(out.splitlines()) == 2
    code, _, err = run(cluster, capsys, monkeypatch, "consume", "--include", "nothing-.*")
    assert code == 1 and "matches no topic" in err


def test_groups_describe_members_state_and_all_groups(cluster, keyed, capsys, monkeypatch):
    with Consumer(cluster.address, group_id="watchers", client_id="watcher-1") as member:
        member.subscribe([keyed])
        assert wait_until(lambda: member.poll(timeout_ms=50) is not None and member.assignment())
        with Consumer(cluster.address, group_id="idle", enable_auto_commit=False) as other:
            other.assign([("keyed", 0)])
            other.commit({("keyed", 0): 2})
        code, out, _ = run(
            cluster, capsys, monkeypatch, "groups", "describe", "watchers", "--members", "--verbose"
        )
        assert code == 0
        header, row = out.splitlines()
        assert header.split() == [
            "GROUP",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "ASSIGNMENT",
        ]
        fields = row.split()
        assert fields[0] == "watchers" and fields[3:] == ["watcher-1", "2", "keyed(0,1)"]
        code, out, _ = run(
            cluster, capsys, monkeypatch, "groups", "describe", "--all-groups", "--state"
        )
        assert code == 0
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:]}
        assert rows["watchers"] == ["range", "Stable", "1"]
        assert rows["idle"][1:] == ["Empty", "0"]
        code, out, _ = run(cluster, capsys, monkeypatch, "groups", "describe", "--all-groups")
        assert code == 0
        assert "Group: watchers\tState: Stable" in out and "Group: idle\tState: Empty" in out
    code, _, err = run(cluster, capsys, monkeypatch, "groups", "describe", "--members")
    assert code == 1 and "give a group or --all-groups" in err


def test_a_mistyped_flag_prints_the_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["topics", "describe", "--underreplicated-partitions"])  # Kafka spells it --under-
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: seglog topics describe ")
    assert (
        "seglog topics describe: error: unrecognized arguments: --underreplicated-partitions" in err
    )
    with pytest.raises(SystemExit):
        main(["consume", "t", "--form-beginning"])
    assert capsys.readouterr().err.startswith("usage: seglog consume ")


def test_cluster_configs_print_as_kafka_configs_does(cluster, capsys, monkeypatch):
    code, out, _ = run(cluster, capsys, monkeypatch, "configs", "describe", "--cluster")
    assert code == 0
    values = dict(line.strip().split("=", 1) for line in out.splitlines() if "=" in line)
    assert not [v for v in values.values() if v in ("None", "()", "True", "False")], values
    assert values["registry.etcd"] == "null"  # unset: no etcd
    assert values["super.users"] == ""  # an empty list
    assert values["auto.leader.rebalance.enable"] == "true"


def test_dump_verify_passes_on_a_nodes_empty_and_indexed_partitions(cluster, capsys):
    cluster.admin.create_topic("empty", 1)
    cluster.admin.create_topic("indexed", 1)
    # Past index.interval.bytes (4096) between batches: the node writes index entries into
    # its active segment's preallocated, zero-filled index files.
    with Producer(cluster.address, linger_ms=0) as producer:
        for _ in range(12):
            producer.send("indexed", b"x" * 1000).get(timeout=30)
    data_dir = str(cluster.root)
    code, out, _ = run_dump(capsys, "--topic", "empty", "--data-dir", data_dir)
    assert code == 0 and "valid: False" not in out, out
    node_dir = cluster.root / f"node-{cluster.leader_of('indexed', 0).config.node_id}"
    (index,) = (node_dir / "indexed-0").glob("*.index")
    assert index.stat().st_size > 1 << 20  # preallocated: mostly unused slots
    code, out, _ = run_dump(capsys, str(index), str(index.with_suffix(".timeindex")))
    entries = [line for line in out.splitlines() if line.startswith(("offset:", "timestamp:"))]
    assert code == 0 and entries, out
    assert all(line.endswith("valid: True problem: None") for line in entries), out
    real = cluster.log("indexed", 0).active_segment.offset_index.entries
    assert len([e for e in entries if e.startswith("offset:")]) == real


def run_dump(capsys, *argv):
    code = main(["dump", "--verify", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_describe_filters_show_only_the_partitions_that_match(cluster, capsys, monkeypatch):
    # Last in the module: it stops a node (and starts it again).
    cluster.admin.create_topic("wide", 2, 3, configs={"min.insync.replicas": "2"})
    cluster.admin.create_topic("single", 1, 1)

    def shown(flag, *topics):
        code, out, _ = run(cluster, capsys, monkeypatch, "topics", "describe", *topics, flag)
        assert code == 0
        return {(line.split()[1], int(line.split()[3])) for line in out.splitlines()}

    # Healthy: nothing matches (and no topic header lines either, as kafka-topics).
    assert shown("--under-replicated-partitions", "wide", "single") == set()
    assert shown("--unavailable-partitions", "wide", "single") == set()
    assert shown("--at-min-isr-partitions", "wide") == set()
    lonely = cluster.leader_of("single", 0).config.node_id
    cluster.stop_node(lonely)
    try:
        wide = {("wide", 0), ("wide", 1)}
        assert wait_until(lambda: shown("--under-replicated-partitions", "wide", "single") == wide)
        assert shown("--unavailable-partitions", "wide", "single") == {("single", 0)}
        assert shown("--at-min-isr-partitions", "wide") == wide  # 2 in sync of 3, min 2
        assert shown("--under-min-isr-partitions", "wide") == set()
    finally:
        cluster.start_node(lonely)


def test_a_tls_client_at_a_plaintext_listener_is_told_so(cluster, tmp_path):
    from seglog.security.certs import CertificateAuthority
    from tests.cluster import run_cli

    ca = tmp_path / "ca.pem"
    ca.write_bytes(CertificateAuthority.create().cert_pem)
    saved = dict(os.environ)
    os.environ["SEGLOG_TLS_CA"] = str(ca)
    try:
        refused = run_cli("topics", "list", bootstrap=cluster.address)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert refused.returncode == 1
    assert b"a TLS client against a plaintext listener" in refused.stderr, refused.stderr
    # The command's error is all it prints: gRPC's own "Handshake failed" log line came first.
    assert refused.stderr.startswith(b"seglog: "), refused.stderr
    assert b"Handshake failed with error" not in refused.stderr, refused.stderr
