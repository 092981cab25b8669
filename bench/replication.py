"""Replication benchmarks on a real cluster (a gateway and three storage nodes, separate
processes on loopback, Kafka's default timings), each beside a baseline measured in the same
run:

- acks=all with replication factor 3 (min.insync.replicas=2, the idempotent producer's
  defaults) against acks=1 with replication factor 1: the same Producer, the same 100 B
  records, taking turns.
- follower catch-up: a follower stopped while SEGLOG_BENCH_CATCH_UP_MIB (default 1024) are
  written to its leader, then restarted; bytes per second until its log end offset reaches
  the leader's, against a bare gRPC server stream of 1 MiB messages carrying as many bytes
  (bench/echo_server.py, the figure the service bench prints as its baseline); the same
  bytes written with os.write to the data file system after as many (the leader's writes
  come first) are printed too, as the ceiling of any follower: it writes what it copies.
- failover: from SIGKILL of a partition's leader to the next acknowledged acks=all write,
  beside `broker.session.timeout.ms` (how long the registry waits before it declares a
  silent node dead); and from SIGTERM (controlled shutdown) to the same, beside the steady
  acks=all write latency.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from seglog.client.producer import Producer
from seglog.errors import SeglogError
from seglog.records import RecordBatchBuilder
from seglog.rpc.channels import open_channel
from seglog.v1 import common_pb2, storage_pb2, storage_pb2_grpc
from services import serving

from .cluster import CLUSTER_SECRET_ENV
from .services import _baseline_stream
from .timing import best_in_turns

MIB = 1024 * 1024
CATCH_UP_MIB = int(os.environ.get("SEGLOG_BENCH_CATCH_UP_MIB", 1024))
RECORDS = 100_000
SESSION_TIMEOUT_MS = 9000  # Kafka's broker.session.timeout.ms, the gateway's default


def _wait(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


class BenchCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        # With the cluster secret, as make run has it: followers copy over the bulk path.
        env = CLUSTER_SECRET_ENV
        self.gateway = gateway_process("127.0.0.1:0", root / "gateway", env=env)
        self.gateway.start()
        self.nodes: dict[int, ServerProcess] = {}
        for node_id in (1, 2, 3):
            self.nodes[node_id] = node_process(
                node_id,
                "127.0.0.1:0",
                root / f"node-{node_id}",
                self.gateway.internal_address,
                extra_args=["--config", "min.insync.replicas=2"],
                env=env,
            )
            self.nodes[node_id].start()
        self.admin = Admin(self.gateway.address)
        _wait(lambda: len(self.live()) == 3, 60, "three nodes")

    def live(self) -> set[int]:
        return {n.node_id for n in self.admin.describe_cluster().nodes if n.live}

    def partition(self, topic: str):  # type: ignore[no-untyped-def]
        return self.admin.describe_topic(topic).partitions[0]

    def close(self) -> None:
        self.admin.close()
        for node in self.nodes.values():
            node.stop()
        self.gateway.stop()


def _produce_records(address: str, topic: str, acks: str) -> float:
    value = b"x" * 100
    idempotent = acks == "all"
    with Producer(address, acks=acks, enable_idempotence=idempotent, linger_ms=5) as producer:
        producer.send(topic, value).get(timeout=30)  # metadata and connection warm
        start = time.perf_counter()
        send = producer.send
        for _ in range(RECORDS):
            send(topic, value)
        producer.flush()
        return time.perf_counter() - start


def bench_acks(cluster: BenchCluster, report) -> None:  # type: ignore[no-untyped-def]
    cluster.admin.create_topic("rf1", 1, 1)
    cluster.admin.create_topic("rf3", 1, 3)
    address = cluster.gateway.address
    times = best_in_turns(
        {
            "rf1": lambda: _produce_records(address, "rf1", "1"),
            "rf3": lambda: _produce_records(address, "rf3", "all"),
        },
        3,
    )
    report(
        "produce acks=all RF3 vs acks=1 RF1, 100 B (k rec/s)",
        RECORDS / times["rf3"] / 1000,
        RECORDS / times["rf1"] / 1000,
        "k rec/s",
        0.5,
    )


def _big_request(topic: str) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(None, os.urandom(16 * 1024 - 80))
    one = builder.build()
    request = common_pb2.ProduceRequest(topic=topic, acks=1, timeout_ms=60_000)
    request.partitions.add(partition=0, records=one * 64)
    return request.SerializeToString()


def bench_catch_up(cluster: BenchCluster, report) -> None:  # type: ignore[no-untyped-def]
    cluster.admin.create_topic("catch-up", 1, 2, configs={"min.insync.replicas": "1"})
    p = cluster.partition("catch-up")
    follower_id = next(r for r in p.replicas if r != p.leader)
    follower = cluster.nodes[follower_id]
    follower.stop()  # controlled: it leaves the ISR, the leader takes acks=1 alone
    _wait(lambda: follower_id not in cluster.partition("catch-up").isr, 30, "the ISR shrink")
    channel = open_channel(cluster.gateway.address)
    produce = channel.unary_unary(
        "/seglog.v1.Gateway/Produce",
        request_serializer=lambda b: b,
        response_deserializer=common_pb2.ProduceResponse.FromString,
    )
    payload = _big_request("catch-up")
    written = 0
    while written < CATCH_UP_MIB * MIB:
        response = produce(payload, timeout=60)
        if response.partitions[0].error:
            raise SeglogError(response.partitions[0].error_message)
        written += len(payload)
    channel.close()
    leader_end = cluster.partition("catch-up").log_end_offset
    start = time.perf_counter()
    follower.start()
    follower_channel = open_channel(follower.address)
    stub = storage_pb2_grpc.StorageNodeStub(follower_channel)  # type: ignore[no-untyped-call]
    ask = storage_pb2.DescribePartitionsRequest(
        partitions=[storage_pb2.HostedPartitionRef(topic="catch-up", partition=0)]
    )

    def caught_up() -> bool:
        [state] = stub.DescribePartitions(ask, timeout=10).partitions
        return state.log_end_offset >= leader_end

    _wait(caught_up, 600, "the follower to catch up")
    elapsed = time.perf_counter() - start
    follower_channel.close()
    echo = ServerProcess("echo", "bench.echo_server", [])
    echo.start()
    try:
        echo_channel = open_channel(echo.address)
        baseline = min(_baseline_stream(echo_channel, written) for _ in range(3))
        echo_channel.close()
    finally:
        echo.stop()
    disk = _sustained_write(cluster.root, payload, written // len(payload))
    mb = written / MIB
    report(
        f"follower catch-up, {mb:.0f} MiB behind (MB/s)",
        mb / elapsed,
        mb / baseline,
        "MB/s",
        0.5,
    )
    # A follower writes every byte it copies: the data file system's sequential write speed
    # bounds it, whatever the network does.
    report(
        "  the same bytes, os.write after as many (MB/s)", mb / disk, mb / baseline, "MB/s", None
    )
    report("  follower catch-up against that write (MB/s)", mb / elapsed, mb / disk, "MB/s", None)


def _sustained_write(directory: Path, payload: bytes, calls: int) -> float:
    """Seconds to write `calls` payloads after writing as many first (as a follower writes
    after its leader did): the page cache's absorbing burst is spent by then."""
    path = directory / "disk-baseline"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for _ in range(calls):
            os.write(fd, payload)
        start = time.perf_counter()
        for _ in range(calls):
            os.write(fd, payload)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()


def _write_latencies(address: str, count: int) -> list[float]:
    with Producer(address, linger_ms=0) as producer:
        producer.send("failover", b"warm").get(timeout=30)
        out = []
        for _ in range(count):
            start = time.perf_counter()
            producer.send("failover", b"x").get(timeout=30)
            out.append(time.perf_counter() - start)
        return out


def _failover_ms(cluster: BenchCluster, how: str) -> float:
    """From the signal to the leader until the next acks=all write is acknowledged, with a
    producer writing one record at a time all along."""
    _wait(
        lambda: (
            sorted(cluster.partition("failover").isr) == [1, 2, 3] and cluster.live() == {1, 2, 3}
        ),
        120,
        "a healed partition",
    )
    leader = cluster.partition("failover").leader
    with Producer(cluster.gateway.address, linger_ms=0, retry_backoff_ms=10) as producer:
        producer.send("failover", b"before").get(timeout=30)
        node = cluster.nodes[leader]
        start = time.perf_counter()
        if how == "kill":
            node.kill()
        else:
            assert node.process is not None
            node.process.send_signal(15)  # SIGTERM: controlled shutdown, then exit
        producer.send("failover", b"after").get(timeout=120)
        elapsed_ms = (time.perf_counter() - start) * 1000
    if how == "term":
        node.stop()  # reap it
    node.start()
    return elapsed_ms


def bench_failover(cluster: BenchCluster, report) -> None:  # type: ignore[no-untyped-def]
    cluster.admin.create_topic("failover", 1, 3)
    steady_ms = statistics.median(_write_latencies(cluster.gateway.address, 200)) * 1000
    kill_ms = _failover_ms(cluster, "kill")
    term_ms = _failover_ms(cluster, "term")
    print(
        f"{'failover after SIGKILL of the leader (ms)':48s} {kill_ms:10.1f} ms       "
        f"session timeout {SESSION_TIMEOUT_MS:6d} ms"
    )
    print(
        f"{'failover after SIGTERM (controlled) (ms)':48s} {term_ms:10.1f} ms       "
        f"steady acks=all write {steady_ms:6.2f} ms"
    )


def run(report) -> None:  # type: ignore[no-untyped-def]
    serving.keep_freed_buffers_for_reuse()
    with tempfile.TemporaryDirectory(prefix="seglog-bench-replication-") as tmp:
        cluster = BenchCluster(Path(tmp))
        try:
            bench_acks(cluster, report)
            bench_catch_up(cluster, report)
            bench_failover(cluster, report)
        finally:
            cluster.close()
