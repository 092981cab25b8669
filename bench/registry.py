"""The registry on etcd against the file: metadata operations (creating a topic, electing a
leader after a node dies) printed side by side, and the data path through a gateway, which
must not notice where the registry lives (routing reads the gateway's cached metadata, never
etcd, per request). Each side is a gateway and two storage nodes as processes on loopback;
the etcd side's gateway keeps its registry in an etcd member started here.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.embedded_etcd import EtcdProcess
from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from services.gateway.cluster.registry import Registry

from .throughput import fetch_seconds, produce_seconds
from .timing import best_in_turns

RECORDS = 300_000
VALUE = b"r" * 100
CREATES = 20
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 1000  # Kafka's ratio of session to heartbeat, roughly
ROUNDS = 5


@contextmanager
def _cluster(root: Path, etcd: bool) -> Iterator[tuple[str, dict[int, ServerProcess]]]:
    processes: list[ServerProcess] = []
    member = EtcdProcess(root / "etcd") if etcd else None
    try:
        registry = []
        if member is not None:
            registry = ["--registry-etcd", member.start()]
        gateway = gateway_process(
            "127.0.0.1:0",
            root / "gateway",
            extra_args=[
                *registry,
                "--session-timeout-ms",
                str(SESSION_TIMEOUT_MS),
                "--gateway-session-timeout-ms",
                str(SESSION_TIMEOUT_MS),
                "--heartbeat-interval-ms",
                str(HEARTBEAT_INTERVAL_MS),
            ],  # fmt: skip
        )
        processes.append(gateway)
        address = gateway.start()
        nodes = {}
        for node_id in (1, 2):
            node = node_process(
                node_id,
                "127.0.0.1:0",
                root / f"node-{node_id}",
                gateway.internal_address,
                extra_args=["--heartbeat-interval-ms", str(HEARTBEAT_INTERVAL_MS)],
            )
            processes.append(node)
            node.start()
            nodes[node_id] = node
        with Admin(address, security_protocol="PLAINTEXT") as admin:
            deadline = time.monotonic() + 30
            while sum(n.live for n in admin.describe_cluster().nodes) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the storage nodes never registered")
                time.sleep(0.05)
        yield address, nodes
    finally:
        for process in reversed(processes):
            process.stop()
        if member is not None:
            member.stop()


def _creates(address: str, prefix: str) -> float:
    with Admin(address, security_protocol="PLAINTEXT") as admin:
        start = time.perf_counter()
        for i in range(CREATES):
            admin.create_topic(f"{prefix}-{i}", 1, 2)
        return time.perf_counter() - start


def _election(address: str, nodes: dict[int, ServerProcess]) -> float:
    """Seconds from a leader's SIGKILL to another leader in the metadata."""
    with Admin(address, security_protocol="PLAINTEXT") as admin:
        admin.create_topic("elected", 1, 2)
        leader = admin.describe_topic("elected").partitions[0].leader
        nodes[leader].kill()
        start = time.perf_counter()
        deadline = start + 60
        while admin.describe_topic("elected").partitions[0].leader in (leader, -1):
            if time.perf_counter() > deadline:
                raise RuntimeError("no leader was elected")
            time.sleep(0.01)
        return time.perf_counter() - start


ROUTE_CALLS = 20_000
PARTITIONS_PER_CREATE = 250
KEPT_TOPICS = 40


def _route_p999_us(root: Path, creating: bool) -> float:
    """p99.9 of `Registry.route` (run per partition of every Produce and Fetch) on a file
    registry, while another thread creates (and deletes) topics of PARTITIONS_PER_CREATE
    partitions back to back (each write fsyncs the whole registry file), or while nothing
    else happens."""
    registry = Registry(root, session_timeout_ms=600_000)
    registry.register_node(1, "127.0.0.1:9")
    registry.create_topic("routed", 1, 1, {})
    stop = threading.Event()

    def create_back_to_back() -> None:
        # At most KEPT_TOPICS at once (the oldest deleted first): below the cluster's limit.
        for i in range(1_000_000):
            if stop.is_set():
                return
            name = f"created-{i % KEPT_TOPICS}"
            if i >= KEPT_TOPICS:
                registry.delete_topic(name)
            registry.create_topic(name, PARTITIONS_PER_CREATE, 1, {})

    creator = threading.Thread(target=create_back_to_back, daemon=True)
    if creating:
        creator.start()
    latencies = []
    try:
        for _ in range(ROUTE_CALLS):
            started = time.perf_counter()
            registry.route("routed", 0)
            latencies.append(time.perf_counter() - started)
            time.sleep(0)  # as a request thread, between requests
    finally:
        stop.set()
        if creating:
            creator.join()
    latencies.sort()
    return latencies[int(len(latencies) * 0.999)] * 1e6


def run(report: Callable[..., None]) -> None:
    with tempfile.TemporaryDirectory(prefix="seglog-bench-route-") as route_root:
        report(
            "route p99.9 while topics are created vs idle (µs)",
            _route_p999_us(Path(route_root) / "busy", creating=True),
            _route_p999_us(Path(route_root) / "idle", creating=False),
            "µs",
            None,
        )
    with (
        tempfile.TemporaryDirectory(prefix="seglog-bench-etcd-") as etcd_root,
        tempfile.TemporaryDirectory(prefix="seglog-bench-file-") as file_root,
        _cluster(Path(etcd_root), etcd=True) as (on_etcd, etcd_nodes),
        _cluster(Path(file_root), etcd=False) as (on_file, file_nodes),
    ):
        rounds = iter(range(1000))
        creates = best_in_turns(
            {
                "etcd": lambda: _creates(on_etcd, f"c{next(rounds)}"),
                "file": lambda: _creates(on_file, f"c{next(rounds)}"),
            },
            ROUNDS,
        )
        report(
            "create topic on etcd vs file (creates/s)",
            CREATES / creates["etcd"],
            CREATES / creates["file"],
            "ops/s",
            None,
        )
        topics = iter(range(1000))

        def produced(address: str) -> float:
            topic = f"data-{next(topics)}"
            with Admin(address, security_protocol="PLAINTEXT") as admin:
                admin.create_topic(topic, 1, 1)
            elapsed = produce_seconds(address, topic, RECORDS, VALUE)
            fetched.setdefault(address, []).append(fetch_seconds(address, topic, RECORDS))
            return elapsed

        fetched: dict[str, list[float]] = {}
        produce = best_in_turns(
            {"etcd": lambda: produced(on_etcd), "file": lambda: produced(on_file)}, ROUNDS
        )
        mb = RECORDS * len(VALUE) / 1e6
        report(
            "produce via gateway on etcd vs file (MB/s)",
            mb / produce["etcd"],
            mb / produce["file"],
            "MB/s",
            0.95,
        )
        report(
            "fetch via gateway on etcd vs file (MB/s)",
            mb / min(fetched[on_etcd]),
            mb / min(fetched[on_file]),
            "MB/s",
            0.95,
        )
        # Last: it kills a node on each side. Both wait out the same session timeout.
        etcd_s = _election(on_etcd, etcd_nodes)
        file_s = _election(on_file, file_nodes)
        report(
            f"leader elected after a node death (s, {SESSION_TIMEOUT_MS} ms sessions)",
            etcd_s,
            file_s,
            "s",
            None,
        )
