"""The `kafka-protocol` group: confluent-kafka (librdkafka) against seglog's Kafka listener,
each figure beside the same work against Apache Kafka itself (devtools/apache_kafka.py, the
jars `make kafka` installs) on this machine in the same run:

- "x1 RF1": one gateway and one storage node against one Kafka broker; "x3 RF3": one gateway
  and three nodes (RF3, min.insync.replicas=2) against three brokers (RF3, the same min ISR);
- producer throughput (acks=all, linger 5 ms) and consumer throughput (every partition
  from the start) with 100 B and 1 KiB records, each side's best of ROUNDS, sides in turns;
- publish (until acknowledged) and end-to-end (until a consumer has it) p50 and p99 at a
  fixed rate both sustain (RATE_PER_S records of 1 KiB for LATENCY_S seconds; each side's
  run with the lower end-to-end p99 of ROUNDS, sides in turns).

Targets (issue 29): throughput >= 0.5x Apache Kafka's, end-to-end p99 <= 2x.
SEGLOG_BENCH_KAFKA_RECORDS scales the throughput runs (default 200 000 records of 100 B; a
fifth as many of 1 KiB).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka.admin

from devtools.apache_kafka import KafkaBrokers
from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from tests.ports import free_ports

from .kafka_clients import (
    Latencies,
    consume_seconds,
    latencies_at_rate,
    percentile,
    produce_seconds,
)
from .timing import best_in_turns

RECORDS = int(os.environ.get("SEGLOG_BENCH_KAFKA_RECORDS", 200_000))
SIZES = {"100 B": 100, "1 KiB": 1024}
PARTITIONS = 4
ROUNDS = 2
RATE_PER_S = 500
LATENCY_S = 10.0
LATENCY_SIZE = 1024


@dataclass
class Side:
    """One system under test: its Kafka bootstrap list and how to make a topic on it."""

    name: str
    bootstrap: str
    create_topic: Callable[[str, int], None]


def _min_insync(nodes: int) -> int:
    return max(1, min(2, nodes - 1))


@contextmanager
def apache_kafka(root: Path, brokers: int) -> Iterator[Side]:
    replicas = min(3, brokers)
    with KafkaBrokers(
        root, brokers, configs={"min.insync.replicas": str(_min_insync(brokers))}
    ) as kafka:

        def create_topic(name: str, partitions: int) -> None:
            # An admin client of its own, gone with the call: one kept by the Side outlived
            # the brokers and printed a connection error a second through the rest of a run.
            admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": kafka.bootstrap})
            futures = admin.create_topics(
                [confluent_kafka.admin.NewTopic(name, partitions, replicas)]
            )
            futures[name].result(60)

        yield Side(f"Apache Kafka x{brokers}", kafka.bootstrap, create_topic)


@contextmanager
def seglog(root: Path, nodes: int) -> Iterator[Side]:
    """A gateway with its Kafka listener and `nodes` storage nodes, as processes (as make run
    starts them): topics of min(3, nodes) replicas, acks=all waiting for min(2, nodes - 1)."""
    root.mkdir(parents=True, exist_ok=True)
    (kafka_port,) = free_ports(1)
    kafka_address = f"127.0.0.1:{kafka_port}"
    gateway = gateway_process(
        "127.0.0.1:0",
        root / "gateway",
        extra_args=[
            "--kafka-listen",
            kafka_address,
            "--default-replication-factor",
            str(min(3, nodes)),
        ],
        stderr_path=root / "gateway.log",
    )
    processes: list[ServerProcess] = [gateway]
    try:
        gateway.start()
        for node_id in range(1, nodes + 1):
            node = node_process(
                node_id,
                "127.0.0.1:0",
                root / f"node-{node_id}",
                gateway.internal_address,
                extra_args=["--config", f"min.insync.replicas={_min_insync(nodes)}"],
                stderr_path=root / f"node-{node_id}.log",
            )
            processes.append(node)
            node.start()
        with Admin(gateway.address) as admin:
            deadline = time.monotonic() + 60
            while len(admin.describe_cluster().nodes) < nodes:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{nodes} storage nodes never registered")
                time.sleep(0.05)

            def create_topic(name: str, partitions: int) -> None:
                admin.create_topic(name, partitions)

            yield Side(f"seglog x{nodes}", kafka_address, create_topic)
    finally:
        for process in reversed(processes):
            process.stop()


def _compare_throughput(
    report: Callable[..., None], ours: Side, theirs: Side, label: str, size_name: str, size: int
) -> None:
    records = RECORDS if size < 1000 else RECORDS // 5
    value = b"v" * size
    topic = f"throughput-{size}"
    produced = {ours.name: 0, theirs.name: 0}

    def producing(side: Side) -> Callable[[], float]:
        side.create_topic(topic, PARTITIONS)

        def run() -> float:
            produced[side.name] += records + 1  # the warm-up record too
            return produce_seconds(side.bootstrap, topic, records, value)

        return run

    def consuming(side: Side) -> Callable[[], float]:
        return lambda: consume_seconds(side.bootstrap, topic, PARTITIONS, produced[side.name])

    best = best_in_turns({side.name: producing(side) for side in (ours, theirs)}, ROUNDS)
    report(
        f"{label} produce {size_name} acks=all (k rec/s)",
        records / best[ours.name] / 1e3,
        records / best[theirs.name] / 1e3,
        "k rec/s",
        0.5,
    )
    # Everything produced, read from the start.
    best = best_in_turns({side.name: consuming(side) for side in (ours, theirs)}, ROUNDS)
    total = produced[ours.name]
    report(
        f"{label} consume {size_name} (k rec/s)",
        total / best[ours.name] / 1e3,
        total / best[theirs.name] / 1e3,
        "k rec/s",
        0.5,
    )


def _compare(report: Callable[..., None], seglog_side: Side, kafka_side: Side, label: str) -> None:
    for size_name, size in SIZES.items():
        _compare_throughput(report, seglog_side, kafka_side, label, size_name, size)
    # Each side's run with the lowest end-to-end p99 of ROUNDS, the sides taking turns, as
    # the throughput figures take each side's best: a slow moment of this shared machine lands
    # on one run, not on one side.
    latencies: dict[str, Latencies] = {}
    for side in (seglog_side, kafka_side):
        side.create_topic("latency", PARTITIONS)
    for _ in range(ROUNDS):
        for side in (seglog_side, kafka_side):
            measured = latencies_at_rate(
                side.bootstrap, "latency", PARTITIONS, RATE_PER_S, LATENCY_S, LATENCY_SIZE
            )
            best = latencies.get(side.name)
            if best is None or percentile(measured.end_to_end_ms, 0.99) < percentile(
                best.end_to_end_ms, 0.99
            ):
                latencies[side.name] = measured
    ours, theirs = latencies[seglog_side.name], latencies[kafka_side.name]
    rate = f"{RATE_PER_S}/s 1 KiB"
    for fraction, name in ((0.5, "p50"), (0.99, "p99")):
        report(
            f"{label} publish {name} {rate} (ms)",
            percentile(ours.publish_ms, fraction),
            percentile(theirs.publish_ms, fraction),
            "ms",
            None,
            higher_is_better=False,
        )
        report(
            f"{label} end-to-end {name} {rate} (ms)",
            percentile(ours.end_to_end_ms, fraction),
            percentile(theirs.end_to_end_ms, fraction),
            "ms",
            2.0 if name == "p99" else None,
            higher_is_better=False,
        )


def run(report: Callable[..., None]) -> None:
    for count, label in ((1, "x1 RF1"), (3, "x3 RF3")):
        with tempfile.TemporaryDirectory(prefix="seglog-bench-kafka-") as tmp:
            root = Path(tmp)
            with (
                apache_kafka(root / "kafka", count) as kafka_side,
                seglog(root / "seglog", count) as seglog_side,
            ):
                _compare(report, seglog_side, kafka_side, label)
