"""The `kafka-protocol` group (`make bench kafka-protocol`): seglog's Kafka listener against
Apache Kafka itself (devtools/apache_kafka.py, the jars `make kafka` installs), both up on this
machine in one run, driven by the same clients, the sides taking turns workload by workload
(kafka_protocol_rounds.py says what is run and how figures are chosen):

- seglog: one gateway and three storage nodes, as `make run` starts them (processes, a
  cluster secret so followers fetch over the bulk path), topics RF3, min.insync.replicas=2;
- Apache Kafka 4.3.1: three brokers (KRaft, each also a controller), RF3, min ISR 2;
- the clients: Kafka's own kafka-producer-perf-test and kafka-consumer-perf-test (the Java
  client), and librdkafka (confluent-kafka);
- the figures: throughput (records/s, MB/s), latency p50/p99 at a fixed rate both sustain,
  and each system's CPU-seconds per million records and peak RSS (seglog: the gateway and
  the nodes; Kafka: the three broker JVMs; never the clients), each printed beside Kafka's
  from the same run, as a ratio.

Targets (issue 53): throughput >= 1.0x Kafka's, p99 <= 1.0x at the fixed rate, CPU per record
<= 1.0x. The machine is shared: a slow moment lands on one run of one side, and each side's
figure is its best run (the median for CPU), so compare ratios, not absolute figures.

SEGLOG_BENCH_KAFKA_RECORDS scales the run (default 250,000 records of 100 B per librdkafka
throughput run, a 25th as many of 1 KiB per perf-test run); SEGLOG_BENCH_KAFKA_ROUNDS
(default 3); SEGLOG_BENCH_KAFKA_RATE fixes the latency runs'
rate (default: half the lower side's best perf-test producer rate of this run);
SEGLOG_BENCH_KAFKA_NODES="1,3" also compares one gateway and one node with one broker (RF1).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

import confluent_kafka.admin

from devtools.apache_kafka import KafkaBrokers
from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from tests.ports import free_ports

from .cluster import CLUSTER_SECRET_ENV
from .kafka_protocol_rounds import Side, compare

# Three JVMs took over 120 s (KafkaBrokers' default) to form their quorum beside seven other
# benchmarks and test suites on two cores (load average 55-87).
START_TIMEOUT_S = 300.0
# group.initial.rebalance.delay.ms of both sides: 0, as Kafka's own config/server.properties
# sets it for development and as devtools/apache_kafka.py starts its brokers. Every group here
# has one consumer, so the 3 s default only waited for members that never come (the group join
# measured 3.45 s on seglog against 0.56 s on Kafka when only Kafka had 0).
INITIAL_REBALANCE_DELAY_MS = 0
NODES = tuple(int(n) for n in os.environ.get("SEGLOG_BENCH_KAFKA_NODES", "3").split(","))


def _min_insync(nodes: int) -> int:
    return max(1, min(2, nodes - 1))


@contextmanager
def apache_kafka(root: Path, brokers: int) -> Iterator[Side]:
    replicas = min(3, brokers)
    configs = {
        "min.insync.replicas": str(_min_insync(brokers)),
        "group.initial.rebalance.delay.ms": str(INITIAL_REBALANCE_DELAY_MS),
    }
    kafka = KafkaBrokers(root, brokers, configs=configs)
    kafka.start(START_TIMEOUT_S)
    try:

        def create_topic(name: str, partitions: int) -> None:
            # An admin client of its own, gone with the call: one kept by the Side outlived
            # the brokers and printed a connection error a second through the rest of a run.
            admin = confluent_kafka.admin.AdminClient(
                {"bootstrap.servers": kafka.bootstrap, "log_level": 3}
            )
            futures = admin.create_topics(
                [confluent_kafka.admin.NewTopic(name, partitions, replicas)]
            )
            futures[name].result(60)

        yield Side(f"Apache Kafka x{brokers}", kafka.bootstrap, create_topic, kafka.pids())
    finally:
        kafka.stop()


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
            "--group-initial-rebalance-delay-ms",
            str(INITIAL_REBALANCE_DELAY_MS),
        ],
        env=CLUSTER_SECRET_ENV,
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
                env=CLUSTER_SECRET_ENV,
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

            yield Side(
                f"seglog x{nodes}",
                kafka_address,
                create_topic,
                [process.pid for process in processes],
            )
    finally:
        for process in reversed(processes):
            process.stop()


@contextmanager
def both_started(
    starters: list[Callable[[], AbstractContextManager[Side]]],
) -> Iterator[list[Side]]:
    """Every side started at once (three JVMs and four Python processes: about a minute on two
    idle cores, each alone), each stopped on the way out even when another failed to start."""
    with ExitStack() as outer:
        stacks = [outer.enter_context(ExitStack()) for _ in starters]
        with ThreadPoolExecutor(len(starters)) as pool:
            futures = [
                pool.submit(stack.enter_context, start())
                for stack, start in zip(stacks, starters, strict=True)
            ]
            sides = [future.result() for future in futures]
        yield sides


def run(report: Callable[..., None]) -> None:

    for count in NODES:
        label = f"x{count} RF{min(3, count)}"
        with tempfile.TemporaryDirectory(prefix="seglog-bench-kafka-") as tmp:
            root = Path(tmp)
            started = time.monotonic()
            with both_started(
                [
                    lambda: seglog(root / "seglog", count),  # noqa: B023 - called in this loop
                    lambda: apache_kafka(root / "kafka", count),  # noqa: B023
                ]
            ) as (seglog_side, kafka_side):
                print(f"# {label}: both systems up in {time.monotonic() - started:.0f} s")
                compare(report, seglog_side, kafka_side, label)
