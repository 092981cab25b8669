"""Spark benchmarks: the seglog data source in a local[2] SparkSession against a gateway and
one storage node (processes on loopback), each beside a baseline measured in the same run:

- batch read of RECORDS 100-byte records (two partitions; tasks read the leader's bulk port,
  as with make run) into Spark's `noop` sink, against
  a Python data source yielding the same rows from Arrow batches it built before the timing
  (the ceiling of Spark's Python Data Source API on this machine);
- batch write of the same rows through the seglog sink, against the seglog Producer alone
  writing them (send_many of the same values, flushed);
- byte-balanced tasks: on one partition whose record sizes vary 100x, the largest task's
  bytes over the smallest's with the source's byte splits (minPartitions=8), and the same
  for eight equal offset counts (what offset-count planning gives).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from seglog.client.admin import Admin
from seglog.client.gateway import GatewayClient, split_points
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.spark.columns import ROWS_PER_ARROW_BATCH, arrow_schema
from seglog.spark.session import local_session
from seglog.spark.source import source_schema

from .cluster import CLUSTER_SECRET, one_node_cluster
from .timing import best_in_turns

RECORDS = int(os.environ.get("SEGLOG_BENCH_SPARK_RECORDS", 1_000_000))
VALUE = b"v" * 100
ROUNDS = 5

# The baseline source's batches, built once per Python worker before the timed runs.
_prebuilt: dict[int, list[pa.RecordBatch]] = {}


def _batches_for(partition: int, rows: int) -> list[pa.RecordBatch]:
    found = _prebuilt.get(partition)
    if found is None:
        schema = arrow_schema(False)
        found = []
        for start in range(0, rows, ROWS_PER_ARROW_BATCH):
            n = min(ROWS_PER_ARROW_BATCH, rows - start)
            found.append(
                pa.RecordBatch.from_arrays(
                    [
                        pa.nulls(n, pa.binary()),
                        pa.array([VALUE] * n, pa.binary()),
                        pa.repeat(pa.scalar("bench", pa.string()), n),
                        pa.repeat(pa.scalar(partition, pa.int32()), n),
                        pa.array(range(start, start + n), pa.int64()),
                        pa.repeat(pa.scalar(1_700_000_000_000_000, pa.timestamp("us", "UTC")), n),
                        pa.repeat(pa.scalar(0, pa.int32()), n),
                    ],
                    schema=schema,
                )
            )
        _prebuilt[partition] = found
    return found


class InMemoryPartition(InputPartition):
    def __init__(self, partition: int, rows: int) -> None:
        super().__init__(partition)
        self.partition = partition
        self.rows = rows


class InMemoryArrowSource(DataSource):
    """Rows of the seglog source's schema from Arrow batches held in memory."""

    @classmethod
    def name(cls) -> str:
        return "inmemoryarrow"

    def schema(self):  # type: ignore[no-untyped-def]
        return source_schema(False)

    def reader(self, schema):  # type: ignore[no-untyped-def]
        return InMemoryArrowReader(int(self.options["rows"]))


class InMemoryArrowReader(DataSourceReader):
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def partitions(self) -> list[InputPartition]:
        return [InMemoryPartition(p, self.rows // 2) for p in range(2)]

    def read(self, partition: InMemoryPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return iter(_batches_for(partition.partition, partition.rows))


def _timed(action: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        action()
        return time.perf_counter() - start

    return run


def run(report: Callable[..., None]) -> None:
    spark = local_session("seglog-bench")
    spark.dataSource.register(InMemoryArrowSource)
    try:
        with one_node_cluster(
            "seglog-bench-spark-", ["bench", "skewed"], 2, cluster_secret=CLUSTER_SECRET
        ) as bootstrap:
            _bench_read_and_write(spark, bootstrap, report)
            _bench_splits(bootstrap)
    finally:
        spark.stop()


def _bench_read_and_write(spark, bootstrap: str, report: Callable[..., None]) -> None:  # type: ignore[no-untyped-def]
    with Producer(bootstrap, linger_ms=5) as producer:
        for partition in range(2):
            for _ in range(0, RECORDS // 2, 10_000):
                producer.send_many("bench", [VALUE] * 10_000, partition=partition)
        producer.flush()

    seglog = spark.read.format("seglog").option("bootstrap", bootstrap).option("subscribe", "bench")
    memory = spark.read.format("inmemoryarrow").option("rows", str(RECORDS))

    def read_seglog() -> None:
        seglog.load().write.format("noop").mode("overwrite").save()

    def read_memory() -> None:
        memory.load().write.format("noop").mode("overwrite").save()

    read_seglog()  # warm: workers started, connections open, batches prebuilt
    read_memory()
    times = best_in_turns({"seglog": _timed(read_seglog), "memory": _timed(read_memory)}, ROUNDS)
    report(
        f"spark batch read {RECORDS // 1000}k x 100 B (k rows/s)",
        RECORDS / times["seglog"] / 1000,
        RECORDS / times["memory"] / 1000,
        "k rows/s",
        0.7,
    )

    rows = memory.load().select("value")
    topics = iter(range(1000))
    admin = Admin(bootstrap)

    def write_spark() -> None:
        topic = f"written-{next(topics)}"
        admin.create_topic(topic, 2)
        rows.write.format("seglog").mode("append").option("bootstrap", bootstrap).option(
            "topic", topic
        ).save()

    def write_producer() -> None:
        topic = f"written-{next(topics)}"
        admin.create_topic(topic, 2)
        with Producer(bootstrap, linger_ms=5) as producer:
            for _ in range(0, RECORDS, ROWS_PER_ARROW_BATCH):
                producer.send_many(topic, [VALUE] * ROWS_PER_ARROW_BATCH)
            producer.flush()

    write_spark()  # warm
    times = best_in_turns({"spark": _timed(write_spark), "producer": _timed(write_producer)}, 2)
    admin.close()
    report(
        f"spark batch write {RECORDS // 1000}k x 100 B (k rows/s)",
        RECORDS / times["spark"] / 1000,
        RECORDS / times["producer"] / 1000,
        "k rows/s",
        0.5,
    )


def _bench_splits(bootstrap: str) -> None:
    tp = TopicPartition("skewed", 0)
    # Small records, then large ones (100 B, then 10 KB: sizes vary 100x), as in a topic
    # whose producers changed what they send.
    with Producer(bootstrap, linger_ms=5) as producer:
        producer.send_many("skewed", [b"s" * 100] * 40_000, partition=0)
        producer.send_many("skewed", [b"l" * 10_000] * 400, partition=0)
        producer.flush()
    with GatewayClient(bootstrap) as client:
        (end,) = client.list_offsets("skewed", {0: -1}).values()
        total = split_points(client, {tp: (0, end.offset)}, 0)[tp].size_bytes
        by_bytes = split_points(client, {tp: (0, end.offset)}, -(-total // 8))[tp].split_bytes
        cuts = [end.offset * k // 8 for k in range(9)]
        by_count = [
            split_points(client, {tp: (cuts[k], cuts[k + 1])}, 0)[tp].size_bytes for k in range(8)
        ]
    print(
        f"{'spark tasks on 100x-skewed records: largest/smallest':48s} "
        f"byte splits {max(by_bytes) / min(by_bytes):5.2f}x ({len(by_bytes)} tasks, target "
        f"<= 1.25x){'  ok' if max(by_bytes) <= 1.25 * min(by_bytes) else '  ABOVE 1.25x'}; "
        f"offset-count splits {max(by_count) / min(by_count):5.2f}x"
    )
