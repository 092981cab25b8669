"""The `kafka-protocol` benchmark's readers of Kafka's own perf tools, on real runs: Kafka 4.3.1's
kafka-producer-perf-test and kafka-consumer-perf-test (the jars `make kafka` installs) against a
one-node cluster's Kafka listener, their output read back as numbers, and the servers' CPU and
peak memory read from /proc over the run. No timing is asserted: only that what the tools
printed was read, whole and consistent."""

from __future__ import annotations

import os

import pytest

from bench.kafka_perf_tools import (
    PerfToolError,
    consumer_perf,
    parse_consumer_perf,
    parse_producer_perf,
    producer_perf,
)
from bench.process_usage import UsageMeter
from devtools import apache_kafka
from tests.cluster import LocalCluster

RECORDS = 2000
WARMUP = 500
SIZE = 100
TOPIC = "perf"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    c = LocalCluster(tmp_path_factory.mktemp("bench-perf-tools"), nodes=1)
    c.admin.create_topic(TOPIC, 2)
    yield c
    c.close()


@pytest.fixture(scope="module")
def produced(cluster):
    """One producer perf run, the servers (this process: LocalCluster runs them in it)
    metered from the tool's first line to its end."""
    meter = UsageMeter([os.getpid()])
    started = []

    def on_start() -> None:
        started.append(True)
        meter.start()

    run = producer_perf(
        cluster.kafka_address, TOPIC, RECORDS, SIZE, warmup_records=WARMUP, on_start=on_start
    )
    return run, meter.stop(), started


def test_producer_perf_test_summary_and_steady_state_lines_are_read(produced):
    run, _, started = produced
    assert started == [True]
    assert run.total.records == RECORDS
    assert run.steady is not None and run.steady.records == RECORDS - WARMUP
    for line in (run.total, run.steady):
        assert line.records_per_s > 0 and line.mb_per_s >= 0
        assert 0 <= line.p50_ms <= line.p95_ms <= line.p99_ms <= line.p999_ms <= line.max_ms
        assert line.avg_ms <= line.max_ms


def test_the_servers_cpu_and_peak_memory_over_a_perf_run_are_read_from_proc(produced):
    _, usage, _ = produced
    assert usage.cpu_s > 0  # the gateway and node served 2,000 records in this process
    with open(f"/proc/{os.getpid()}/status") as status:
        rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    assert usage.peak_rss_bytes >= rss_kib * 1024 * 0.5


def test_consumer_perf_test_line_is_read(cluster, produced):
    # 90 s without a record (the group join counts): a run's time is not what is tested.
    perf = consumer_perf(
        cluster.kafka_address, TOPIC, RECORDS, "bench-perf-tools", timeout_ms=90_000
    )
    assert perf.records == RECORDS
    assert perf.mb == pytest.approx(RECORDS * SIZE / 1024 / 1024, abs=1e-3)
    assert perf.rebalance_ms >= 0 and perf.fetch_ms >= 0
    assert perf.records_per_s > 0 and perf.fetch_records_per_s > 0


def test_a_consumer_perf_test_that_stopped_short_is_an_error():
    output = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "WARNING: Exiting before consuming the expected number of messages: timeout (10000 ms) "
        "exceeded. You can use the --timeout option to increase the timeout.\n"
        "2026-12-02 00:00:00:000, 2026-12-02 00:00:10:000, 0.0100, 0.0010, 100, 10.0000, 5, "
        "9995, 0.0010, 10.0050\n"
    )
    with pytest.raises(PerfToolError, match="stopped short"):
        parse_consumer_perf(output)


def test_a_producer_perf_test_without_its_summary_line_is_an_error():
    window_only = (
        "1000 records sent, 200.0 records/sec (0.02 MB/sec), 3.1 ms avg latency, "
        "9.0 ms max latency.\n"
    )
    with pytest.raises(PerfToolError, match="no summary line"):
        parse_producer_perf(window_only)
