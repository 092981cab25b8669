"""Kafka's tools' flags the CLI takes as Kafka's tools do, each refused before: kafka-topics'
`--topic` (a name, or for list/describe a whole-name regular expression) and
`--exclude-internal`; kafka-console-producer's `--property parse.key/key.separator/
null.marker/ignore.error` (a tombstone from the command line) and `--producer-property` /
`--producer.config`; kafka-console-consumer's `--consumer-property`; kafka-consumer-groups'
`reset-offsets --by-duration` and `--to-current`; and a gRPC CLI pointed at the Kafka port
told so instead of a bare "Connection reset". One in-process cluster for the module."""

from __future__ import annotations

import time

import pytest

from seglog.cli.groups import _duration_ms
from seglog.cli.quotas import java_double
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from tests.cluster import LocalCluster
from tests.cluster import cli_in_process as run
from tests.ports import free_ports


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("cli-kafka-flags"), nodes=3)
    yield c
    c.close()


def _read_all(cluster, topic: str, expected: int) -> list:
    """Partition 0 of `topic` from the start, until `expected` records (bounded)."""
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        records: list = []
        deadline = time.monotonic() + 30
        while len(records) < expected and time.monotonic() < deadline:
            records += consumer.poll_records(timeout_ms=200)
        return records


def test_topics_take_kafka_topics_topic_flag_and_exclude_internal(cluster, capsys, monkeypatch):
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "create", "--topic", "orders.eu")
    assert code == 0 and "Created topic orders.eu." in out
    run(cluster, capsys, monkeypatch, "topics", "create", "orders.us")
    run(cluster, capsys, monkeypatch, "topics", "create", "payments")
    # list --topic: a regular expression over whole names, commas as alternatives
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "list", "--topic", "orders\\..*")
    assert code == 0 and out.split() == ["orders.eu", "orders.us"]
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "list", "--topic", "payments,x")
    assert out.split() == ["payments"]
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "list", "--topic", "orders")
    assert (code, out) == (0, "")  # a whole-name match: "orders" names no topic
    # describe --topic
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "describe", "--topic", "orders.eu")
    assert code == 0 and out.startswith("Topic: orders.eu\tPartitionCount: 1")
    assert "orders.us" not in out
    code, _, err = run(cluster, capsys, monkeypatch, "topics", "describe", "--topic", "nope.*")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err and "nope" in err
    # internal topics match a pattern unless --exclude-internal, as kafka-topics
    cluster.admin.list_group_offsets("g")  # any group call brings __consumer_offsets
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "list", "--topic", "__.*")
    internal = out.split()
    code, out, _ = run(
        cluster, capsys, monkeypatch, "topics", "list", "--topic", "__.*", "--exclude-internal"
    )
    assert out == "" and all(name.startswith("__") for name in internal)
    code, out, _ = run(cluster, capsys, monkeypatch, "topics", "list", "--exclude-internal")
    assert code == 0 and {"orders.eu", "payments"} <= set(out.split())
    # alter and delete by --topic; naming it twice is refused
    code, _, _ = run(
        cluster, capsys, monkeypatch, "topics", "alter", "--topic", "payments", "--partitions", "2"
    )
    assert code == 0 and len(cluster.admin.describe_topic("payments").partitions) == 2
    with pytest.raises(SystemExit, match="name the topic once"):
        run(cluster, capsys, monkeypatch, "topics", "delete", "payments", "--topic", "payments")
    code, _, _ = run(cluster, capsys, monkeypatch, "topics", "delete", "--topic", "payments")
    assert code == 0 and "payments" not in cluster.admin.list_topics()


def test_console_producer_properties_write_keys_and_tombstones(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("tombstones", 1)
    lines = b"a:1\nb:NULL\nNULL:3\nno-separator\n"
    code, _, err = run(
        cluster,
        capsys,
        monkeypatch,
        "produce",
        "tombstones",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--property",
        "null.marker=NULL",
        "--property",
        "ignore.error=true",
        "--producer-property",
        "linger.ms=0",
        stdin=lines,
    )
    assert code == 0, err
    records = _read_all(cluster, "tombstones", 4)
    assert [(r.key, r.value) for r in records] == [
        (b"a", b"1"),
        (b"b", None),  # a tombstone, written from the command line
        (None, b"3"),
        (None, b"no-separator"),  # ignore.error: the whole line as the value
    ]
    # without ignore.error a line lacking the separator stops the command, as Kafka's reader
    with pytest.raises(SystemExit, match="no key separator"):
        run(
            cluster,
            capsys,
            monkeypatch,
            "produce",
            "tombstones",
            "--property",
            "parse.key=true",
            stdin=b"tab\tkeyed\nuntabbed\n",
        )
    code, _, err = run(
        cluster,
        capsys,
        monkeypatch,
        "produce",
        "tombstones",
        "--property",
        "parse.key=yes",
        stdin=b"x\n",
    )
    assert code == 1 and "parse.key" in err


def test_producer_and_consumer_config_files_and_properties(cluster, tmp_path, capsys, monkeypatch):
    cluster.admin.create_topic("configured", 1)
    bad = tmp_path / "bad.properties"
    bad.write_text("# a comment\nmax.request.size=10\n")
    code, _, err = run(
        cluster,
        capsys,
        monkeypatch,
        "produce",
        "configured",
        "--producer.config",
        str(bad),
        stdin=b"x" * 100 + b"\n",
    )
    # the file's max.request.size reached the producer: a 100-byte record is too large
    assert code == 1 and "TOO_LARGE" in err, err
    good = tmp_path / "good.properties"
    good.write_text("! Kafka's other comment\nmax.request.size: 10\n\nlinger.ms=0\n")
    code, _, err = run(
        cluster,
        capsys,
        monkeypatch,
        "produce",
        "configured",
        "--producer.config",
        str(good),
        "--producer-property",
        "max.request.size=1048576",  # the flag wins over the file, as Kafka's tools
        stdin=b"x" * 100 + b"\n",
    )
    assert code == 0, err
    broken = tmp_path / "broken.properties"
    broken.write_text("just words\n")
    code, _, err = run(
        cluster, capsys, monkeypatch, "consume", "configured", "--consumer.config", str(broken)
    )
    assert code == 1 and "broken.properties:1" in err
    code, out, err = run(
        cluster,
        capsys,
        monkeypatch,
        "consume",
        "configured",
        "--offset",
        "earliest",
        "--max-messages",
        "1",
        "--consumer-property",
        "fetch.max.wait.ms=50",
    )
    assert code == 0 and "x" * 100 in out, err
    code, _, err = run(
        cluster, capsys, monkeypatch, "consume", "configured", "--consumer-property", "nonsense"
    )
    assert code == 1 and "expected NAME=VALUE" in err


def test_duration_parses_as_java_time_duration():
    assert _duration_ms("PT30M") == 30 * 60_000
    assert _duration_ms("P1DT2H") == 26 * 3_600_000
    assert _duration_ms("pt1.5s") == 1500
    assert _duration_ms("-PT1S") == -1000
    for bad in ("P", "PT", "30m", "P1H", "PT1.5"):
        with pytest.raises(Exception, match="ISO-8601"):
            _duration_ms(bad)


def test_reset_offsets_by_duration_and_to_current(cluster, capsys, monkeypatch):
    cluster.admin.create_topic("aged", 1)
    with Producer(cluster.address) as producer:
        for i in range(4):
            # two records two hours old, two from now
            producer.send("aged", b"%d" % i, timestamp_ms=None if i >= 2 else 1)
    cluster.admin.alter_group_offsets("ager", {_tp("aged"): 1})
    code, out, err = run(
        cluster,
        capsys,
        monkeypatch,
        "groups",
        "reset-offsets",
        "ager",
        "--topic",
        "aged",
        "--by-duration",
        "PT1H",
        "--execute",
    )
    assert code == 0, err
    # within the last hour: offsets 2 and 3 only (the first two are stamped at 1 ms)
    assert cluster.admin.list_group_offsets("ager")[_tp("aged")].committed == 2
    code, out, err = run(
        cluster,
        capsys,
        monkeypatch,
        "groups",
        "reset-offsets",
        "ager",
        "--all-topics",
        "--to-current",
        "--execute",
    )
    assert code == 0 and cluster.admin.list_group_offsets("ager")[_tp("aged")].committed == 2


def _tp(topic: str):
    from seglog.client.structs import TopicPartition

    return TopicPartition(topic, 0)


def test_the_grpc_cli_at_the_kafka_port_is_told_so(cluster, capsys, monkeypatch):
    from seglog.cli.main import main

    code = main(["topics", "list", "--bootstrap-server", cluster.kafka_address])
    err = capsys.readouterr().err
    assert code == 1 and "is a Kafka listener" in err and cluster.kafka_address in err
    nobody = f"127.0.0.1:{free_ports(1)[0]}"
    code = main(["topics", "list", "--bootstrap-server", nobody])
    err = capsys.readouterr().err
    assert code == 1 and f"is the cluster running at {nobody}?" in err


def test_a_group_consume_with_no_gateway_says_so_and_fails(capsys):
    from seglog.cli.main import main

    nobody = f"127.0.0.1:{free_ports(1)[0]}"
    code = main(["consume", "orders", "--group", "g", "--bootstrap-server", nobody])
    err = capsys.readouterr().err
    # before: nothing printed, the member waiting for its group for ever
    assert code == 1 and "NODE_UNAVAILABLE" in err and f"running at {nobody}?" in err


def test_a_group_members_poll_returns_within_its_timeout_when_no_gateway_answers():
    nobody = f"127.0.0.1:{free_ports(1)[0]}"
    with Consumer(nobody, group_id="g", retry_backoff_ms=50) as consumer:
        consumer.subscribe(["orders"])
        started = time.monotonic()
        assert consumer.poll_records(timeout_ms=300) == []
        # before: the join retried inside the poll until the coordinator answered (never)
        assert time.monotonic() - started < 30
        assert consumer.poll_records(timeout_ms=0) == []  # and again, without a second revoke


def test_quota_rates_print_as_kafka_configs_prints_a_java_double():
    # before: %g, which printed 1048576 as 1.04858e+06 and 2000000.5 as 2e+06
    assert [java_double(v) for v in (1048576.0, 2000000.5, 2048, 1e7, 1.5e10, 5e-4)] == [
        "1048576.0",
        "2000000.5",
        "2048.0",
        "1.0E7",
        "1.5E10",
        "5.0E-4",
    ]
