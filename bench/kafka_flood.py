"""Issue 52's flood of the Kafka listener, measured on a gateway process and one node:
librdkafka produce p99 (acks=all, one record at a time) under three connections announcing
100 MiB and a thousand idle TCP connections, against the quiet p99 of the same run; the
gateway's resident-set growth under the flood; and what IDLE idle Kafka connections (each
sent one ApiVersions) cost it in resident set and threads.

`python -m bench kafka-flood`; SEGLOG_BENCH_IDLE_CONNECTIONS sets IDLE (default 5,000).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from tests.kafka_flood import (
    MIB,
    Flood,
    p99,
    process_status,
    raise_open_files_limit,
    rdkafka_latencies,
    reset_peak,
)
from tests.ports import free_ports
from tests.waiting import wait_until

IDLE = int(os.environ.get("SEGLOG_BENCH_IDLE_CONNECTIONS", 5000))
SAMPLES = 300
FLOODED_SAMPLES_S = 60.0  # a stalled produce ends the flooded sampling after this


def _flooded_latencies(producer: Any, seconds: float) -> tuple[list[float], str]:
    """Samples until SAMPLES or `seconds`; with how sampling ended."""
    samples: list[float] = []
    deadline = time.monotonic() + seconds
    while len(samples) < SAMPLES and time.monotonic() < deadline:
        try:
            samples += rdkafka_latencies(producer, "steady", 10)
        except (TimeoutError, AssertionError) as exc:
            return samples or [30.0], f"stalled: {exc}"
    return samples, "ok"


def run(report: Callable[..., None]) -> None:
    raise_open_files_limit()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        [kafka_port] = free_ports(1)
        env = {"SEGLOG_MAX_CONNECTIONS_PER_IP": str(IDLE + 2000)}  # ignored where unknown
        gateway = gateway_process(
            "127.0.0.1:0",
            root / "gateway",
            extra_args=[
                *("--kafka-listen", f"127.0.0.1:{kafka_port}"),
                *("--kafka-max-connections", str(IDLE + 2000)),
            ],
            env=env,
            stderr_path=root / "gateway.log",
        )
        gateway.start()
        processes: list[ServerProcess] = [gateway]
        try:
            node = node_process(
                1, "127.0.0.1:0", root / "node-1", gateway.address, stderr_path=root / "node.log"
            )
            node.start()
            processes.append(node)
            admin = Admin(gateway.address)
            assert wait_until(lambda: any(n.live for n in admin.describe_cluster().nodes), 30)
            admin.create_topic("steady", 1, 1)
            _measure(report, gateway.pid, f"127.0.0.1:{kafka_port}")
            admin.close()
        finally:
            for process in reversed(processes):
                process.stop()


def _measure(report: Callable[..., None], pid: int, kafka: str) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka, "linger.ms": 0, "acks": "all", "message.timeout.ms": 30_000}
    )
    rdkafka_latencies(producer, "steady", 20)
    quiet = rdkafka_latencies(producer, "steady", SAMPLES)
    reset_peak(pid)
    before = process_status(pid)
    files = len(os.listdir(f"/proc/{pid}/fd"))
    flood = Flood(kafka, idle_source="127.0.0.2")
    flood.start()
    # Sampled once the gateway holds the flood (each connection an open file).
    wait_until(lambda: len(os.listdir(f"/proc/{pid}/fd")) >= files + 990, 30)
    flooded, how = _flooded_latencies(producer, FLOODED_SAMPLES_S)
    during = process_status(pid)
    closed = flood.large_closed()
    flood.close()
    producer.purge()
    print(
        f"flood: 3 x 100 MiB announced ({closed} closed by the gateway), 1000 idle; "
        f"sampling {how}; threads {before['Threads']} -> {during['Threads']}"
    )
    report(
        "Kafka produce p99 under the flood (quiet = base)",
        p99(flooded) * 1000,
        p99(quiet) * 1000,
        "ms",
        2.0,
        higher_is_better=False,
    )
    growth = (during["VmHWM"] - before["VmRSS"]) / MIB
    report(
        "gateway RSS growth under the flood (64 = base)",
        growth,
        64,
        "MiB",
        1.0,
        higher_is_better=False,
    )
    wait_until(lambda: process_status(pid)["Threads"] <= before["Threads"] + 50, 30)
    before = process_status(pid)
    idle = Flood(kafka, large=0, idle=IDLE, idle_source="127.0.0.3", spoken=True)
    started = time.monotonic()
    idle.start()
    answered = idle.answered()
    during = process_status(pid)
    idle.close()
    print(
        f"{IDLE} idle Kafka connections ({idle.refused} refused, {answered} answered, "
        f"{time.monotonic() - started:.1f} s): threads {before['Threads']} -> "
        f"{during['Threads']}"
    )
    report(
        f"gateway RSS growth, {IDLE} idle conns (200 = base)",
        (during["VmRSS"] - before["VmRSS"]) / MIB,
        200,
        "MiB",
        1.0,
        higher_is_better=False,
    )
    report(
        f"gateway threads with {IDLE} idle conns (before = base)",
        during["Threads"],
        before["Threads"],
        "threads",
        None,
        higher_is_better=False,
    )
