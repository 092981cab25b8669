"""The scale benchmark's harness at a tiny size, so it cannot rot: real processes (a gateway,
three nodes), one step of 30 partitions, every figure measured; and its two registry-bytes
probes against a real directory and a real etcd."""

import os
from pathlib import Path

import pytest
from etcd3gw.client import Etcd3Client

from bench.scale import ScaleShape, run_shape
from bench.scale_kafka import KafkaCreating, kafka_creating_p99
from bench.scale_probes import FileWrites, etcd_revision, etcd_written_bytes
from tests.etcd import Etcd

TINY = ScaleShape(
    steps=(30,),
    topic_partitions=15,
    one_topic_partitions=0,
    backends=("file",),
    idle_window_s=0.5,
    latency_samples=3,
    steady_rate_per_s=20,
    steady_baseline_s=1.0,
    settle_s=0.1,
    registry_write_settle_s=0.2,
    kafka_reference=False,  # its own test below, on one broker
)


@pytest.mark.long  # a benchmark's run
def test_tiny_scale_run_measures_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_shape(TINY)["file"]
    printed = capsys.readouterr().out
    assert result.baseline is not None and result.baseline.reached
    (step,) = result.climb
    assert step.reached, step.seen
    assert step.partitions == 30 and not step.fenced and step.leader_changes == 0
    assert set(step.node_cpu_s) == {"node 1", "node 2", "node 3"}
    assert step.node_rss_bytes > 0 and step.gateway_rss_bytes > 0
    # Every node hosts a replica of each of the 40 partitions: at least a file apiece.
    assert step.node_descriptors > 40
    assert step.produce_ms > 0 and result.baseline.produce_ms > 0
    assert result.steady_p99_ms is not None and all(p > 0 for p in result.steady_p99_ms)
    assert f"the same records' {result.steady_moves}" in printed
    assert result.registry_bytes[30] > 0
    assert result.controlled_shutdown_s is not None
    led, moved_s = result.controlled_shutdown_s
    assert led > 0 and moved_s is not None
    assert "30 partitions, every ISR full" in printed and "the cost curve" in printed


@pytest.mark.long  # a benchmark's run
def test_kafka_reference_measures_the_probe_while_apache_kafka_creates_topics() -> None:
    measured = kafka_creating_p99(
        partitions=20, topic_partitions=10, rate_per_s=20, idle_s=1.0, deadline_s=120, brokers=1
    )
    assert isinstance(measured, KafkaCreating), measured
    idle_n, _ = measured.samples  # the creations may be over before a record is sent
    assert idle_n > 0 and measured.failures == 0
    assert measured.idle_p99_ms > 0 and measured.create_s > 0
    assert measured.moves.startswith("p50 ") and ", p90 " in measured.moves


def test_file_writes_count_replaced_files_whole_and_appended_files_by_growth(
    tmp_path: Path,
) -> None:
    (tmp_path / "appended.log").write_bytes(b"a" * 100)
    (tmp_path / "replaced.json").write_bytes(b"r" * 300)
    (tmp_path / "untouched").write_bytes(b"u" * 50)
    writes = FileWrites.start(tmp_path)
    with open(tmp_path / "appended.log", "ab") as appended:
        appended.write(b"b" * 20)
    (tmp_path / "replaced.json.tmp").write_bytes(b"s" * 310)
    os.replace(tmp_path / "replaced.json.tmp", tmp_path / "replaced.json")
    assert writes.written_bytes(tmp_path) == 20 + 310


def test_etcd_written_bytes_reads_each_revision_back(tmp_path: Path) -> None:
    etcd = Etcd(tmp_path / "etcd")
    try:
        host, port = etcd.endpoint.rsplit(":", 1)
        client = Etcd3Client(host=host, port=int(port), api_path="/v3/")
        client.put("/outside", "x" * 1000)
        since = etcd_revision(etcd.endpoint)
        client.put("/p/a", "1" * 10)
        client.put("/p/a", "2" * 20)  # the same key twice: both writes count
        client.put("/p/b", "3" * 30)
        client.put("/outside", "y" * 1000)
        written, revisions = etcd_written_bytes(etcd.endpoint, "/p/", since)
    finally:
        etcd.stop()
    assert revisions == 4
    assert written == (4 + 10) + (4 + 20) + (4 + 30)
