"""`make bench tiered`: tiered storage's reads, a gateway and one storage node (processes on
loopback) beside a real S3 store (SeaweedFS), each figure beside a baseline of the same run:

- cold read: SEGLOG_BENCH_TIERED_MIB (default 2048 MiB, issue 56's 2 GiB) of 1000-byte
  records, read with 8 MiB fetches through the gateway from offset 0 of a tiered topic whose
  segments are all in the store (the node reads them with ranged GETs), against the same
  read of a topic holding the same records on the node's disk (target >= 0.5x);
- Spark batch read of a tiered topic of SEGLOG_BENCH_TIERED_SPARK_MIB (default 256 MiB: 2 GiB
  would make each of its 30-odd reads minutes long) at 1, 2 and 4 executors (local[n])
  straight from the store (the remoteStorage.* options) against the same read through the
  brokers, into Spark's noop sink, after checking both read the same rows (target >= 2x at
  4).
Both sides of each figure take turns (timing.best_in_turns); the load average is reported.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from devtools.seaweedfs import ACCESS_KEY_ID, BUCKET, SECRET_ACCESS_KEY, SeaweedProcess
from seglog.client.admin import Admin
from seglog.client.fetched import next_offset_after
from seglog.client.gateway import FetchPosition, GatewayClient
from seglog.client.producer import Producer
from seglog.spark.session import local_session

from .cluster import CLUSTER_SECRET, one_node_cluster
from .timing import best_in_turns

MIB = 1024 * 1024
TOTAL_BYTES = int(os.environ.get("SEGLOG_BENCH_TIERED_MIB", 2048)) * MIB
SPARK_BYTES = int(os.environ.get("SEGLOG_BENCH_TIERED_SPARK_MIB", 256)) * MIB
PARTITIONS = 4
VALUE = b"t" * 1000
SEGMENT_BYTES = 16 * MIB
FETCH_BYTES = 8 * MIB
ROUNDS = 3
EXECUTORS = (1, 2, 4)
TIERED_TIMEOUT_S = 600
# SeaweedFS's volumes (64 MiB each) for the tiered topics and some room.
STORE_VOLUMES = (2 * TOTAL_BYTES + SPARK_BYTES) // (64 * MIB) + 16


def run(report: Callable[..., None]) -> None:
    with tempfile.TemporaryDirectory(prefix="seglog-bench-tiered-") as tmp:
        store = SeaweedProcess(Path(tmp) / "seaweedfs", max_volumes=STORE_VOLUMES)
        store.start()
        try:
            node_args = [
                "--remote-log-storage-endpoint", store.endpoint_url,
                "--remote-log-storage-bucket", BUCKET,
                "--remote-log-storage-access-key-id", ACCESS_KEY_ID,
                "--config", "remote.log.manager.task.interval.ms=200",
                "--config", "retention.check.interval.ms=500",
            ]  # fmt: skip
            with one_node_cluster(
                "seglog-bench-tiered-",
                [],
                PARTITIONS,
                cluster_secret=CLUSTER_SECRET,
                env={"SEGLOG_REMOTE_LOG_STORAGE_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY},
                gateway_args=["--remote-log-storage-system-enable", "true"],
                node_args=node_args,
            ) as bootstrap:
                local_starts = _fill(bootstrap)
                _bench_cold_read(bootstrap, local_starts, report)
                _bench_spark(bootstrap, store, report)
        finally:
            store.stop()


def _fill(bootstrap: str) -> dict[int, int]:
    """The same records in `cold` (tiered, every rolled segment only in the store) and `hot`
    (local), fewer in `spark` (tiered); each partition's local log start of `cold` once its
    segments are tiered."""
    segment = {"segment.bytes": str(SEGMENT_BYTES)}
    tiered = {
        **segment,
        "remote.storage.enable": "true",
        "local.retention.bytes": "1",
        "retention.ms": "-1",
        "file.delete.delay.ms": "0",
    }
    with Admin(bootstrap) as admin:
        admin.create_topic("hot", PARTITIONS, configs=segment)
        admin.create_topic("cold", PARTITIONS, configs=tiered)
        admin.create_topic("spark", PARTITIONS, configs=tiered)
    sizes = {"cold": TOTAL_BYTES, "hot": TOTAL_BYTES, "spark": SPARK_BYTES}
    with Producer(bootstrap, linger_ms=5) as producer:
        for topic, size in sizes.items():
            for partition in range(PARTITIONS):
                for _ in range(0, size // len(VALUE) // PARTITIONS, 1000):
                    producer.send_many(topic, [VALUE] * 1000, partition=partition)
            producer.flush()
    _wait_tiered(bootstrap, "spark", SPARK_BYTES)
    return _wait_tiered(bootstrap, "cold", TOTAL_BYTES)


def _wait_tiered(bootstrap: str, topic: str, size: int) -> dict[int, int]:
    """Each partition's local log start once every rolled segment of `topic` is copied and
    gone from the disk (the active one is what stays)."""
    per_partition = -(-(size // len(VALUE) // PARTITIONS) // 1000) * 1000  # calls of 1000
    with GatewayClient(bootstrap) as client:
        deadline = time.monotonic() + TIERED_TIMEOUT_S
        while True:
            local = client.list_offsets(topic, {p: -4 for p in range(PARTITIONS)})
            tiered = client.list_offsets(topic, {p: -5 for p in range(PARTITIONS)})
            starts = {p: r.offset for p, r in local.items()}
            least = per_partition - SEGMENT_BYTES // len(VALUE) - 1000
            if all(0 < s >= least and tiered[p].offset == s - 1 for p, s in starts.items()):
                print(f"tiered {topic}: local log starts {starts} (of {per_partition} each)")
                return starts
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} was not tiered in time: {starts}")
            time.sleep(0.5)


def _read(client: GatewayClient, topic: str, ends: dict[int, int]) -> int:
    """Every partition's [0, end) in 8 MiB fetches, a thread per partition; the bytes read."""
    done = [0] * PARTITIONS
    failed: list[BaseException] = []

    def one(partition: int) -> None:
        offset, end = 0, ends[partition]
        try:
            while offset < end:
                position = FetchPosition(topic, partition, offset, FETCH_BYTES)
                # One fetch's answer may come as several messages (gRPC's size limit).
                for answer in client.fetch([position], max_wait_ms=500, max_bytes=FETCH_BYTES):
                    if answer.error:
                        raise RuntimeError(f"{topic}-{partition} at {offset}: {answer.error}")
                    if answer.records:
                        offset = next_offset_after(answer.records, offset)
                        done[partition] += len(answer.records)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=one, args=(p,)) for p in range(PARTITIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    return sum(done)


def _bench_cold_read(
    bootstrap: str, local_starts: dict[int, int], report: Callable[..., None]
) -> None:
    sizes: dict[str, int] = {}
    with GatewayClient(bootstrap) as client:

        def timed(topic: str) -> Callable[[], float]:
            def go() -> float:
                started = time.perf_counter()
                sizes[topic] = _read(client, topic, local_starts)
                return time.perf_counter() - started

            return go

        times = best_in_turns({"cold": timed("cold"), "hot": timed("hot")}, ROUNDS)
    # The same offsets both ways, in batches the producer may have cut a little differently
    # per topic; the local read's last fetch may run past them (the remote one stops at the
    # local log start): each side's rate counts its own bytes, which must be close.
    if abs(sizes["cold"] - sizes["hot"]) > PARTITIONS * FETCH_BYTES + sizes["hot"] // 100:
        raise RuntimeError(f"cold read {sizes['cold']} bytes, hot {sizes['hot']}")
    report(
        f"tiered cold read {sizes['cold'] // MIB} MiB from the store vs local (MiB/s)",
        sizes["cold"] / MIB / times["cold"],
        sizes["hot"] / MIB / times["hot"],
        "MiB/s",
        0.5,
    )


def _bench_spark(bootstrap: str, store: SeaweedProcess, report: Callable[..., None]) -> None:
    remote = {
        "remoteStorage.endpoint": store.endpoint_url,
        "remoteStorage.bucket": BUCKET,
        "remoteStorage.accessKeyId": ACCESS_KEY_ID,
        "remoteStorage.secretAccessKey": SECRET_ACCESS_KEY,
    }
    for executors in EXECUTORS:
        spark = local_session(f"seglog-bench-tiered-{executors}", master=f"local[{executors}]")
        try:
            _spark_at(spark, executors, bootstrap, remote, report)
        finally:
            spark.stop()


def _spark_at(spark, executors: int, bootstrap: str, remote: dict[str, str], report) -> None:  # type: ignore[no-untyped-def]
    def load(direct: bool):  # type: ignore[no-untyped-def]
        reader = (
            spark.read.format("seglog")
            .option("bootstrap", bootstrap)
            .option("subscribe", "spark")
            .option("maxBytesPerTask", str(16 * MIB))
        )
        for key, value in (remote if direct else {}).items():
            reader = reader.option(key, value)
        return reader.load()

    if executors == EXECUTORS[0]:  # the same rows both ways, checked once
        sums = [
            load(d).selectExpr("count(*)", "sum(offset)", "sum(length(value))").collect()
            for d in (True, False)
        ]
        if sums[0] != sums[1]:
            raise RuntimeError(f"direct read {sums[0]} != through the brokers {sums[1]}")
    rows = load(False).count()

    def timed(direct: bool) -> Callable[[], float]:
        def go() -> float:
            started = time.perf_counter()
            load(direct).write.format("noop").mode("overwrite").save()
            return time.perf_counter() - started

        return go

    timed(True)()  # warm: workers started, connections open
    times = best_in_turns({"direct": timed(True), "brokers": timed(False)}, ROUNDS)
    report(
        f"spark read of a tiered topic, store vs brokers, {executors} executor(s) (k rows/s)",
        rows / times["direct"] / 1000,
        rows / times["brokers"] / 1000,
        "k rows/s",
        2.0 if executors == 4 else None,
    )
