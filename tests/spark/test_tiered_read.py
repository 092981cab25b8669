"""A batch read of a tiered topic straight from the object store (a real SeaweedFS, a real
SparkSession): with the remoteStorage.* options the source plans tasks over the copied
segments, which the executors read from the store, and only the local tail through the
cluster; the rows, offsets and headers equal a read through the brokers."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from seglog.client.producer import Producer
from seglog.errors import SeglogError
from seglog.spark import remote_planning, remote_reading
from seglog.spark.columns import FIRST_ARROW_BATCH_ROWS
from seglog.spark.options import OptionError, parse_read_options
from seglog.spark.reading import RangeRead, read_range
from seglog.spark.remote_reading import RemoteRangeRead, read_remote_range
from seglog.spark.source import SeglogBatchReader
from seglog.storage.remote_layout import OFFSET_INDEX
from seglog.storage.remote_metadata import RemoteLogMetadata
from seglog.storage.remote_store import RemoteStore
from tests.cluster import LocalCluster
from tests.waiting import wait_for

PREFIX = "spark-tiered"
TOPIC = "spark-tiered"
PARTITIONS = 2
RECORDS = 3000  # per partition: ~20 segments of 16 KiB each
TIMEOUT_S = 60
CHUNK = 100


@pytest.fixture(scope="module")
def tiered_cluster(spark, tmp_path_factory, seaweedfs):
    # After Spark (the `spark` fixture): Spark's fork of its JVM must not meet gRPC's threads.
    cluster = LocalCluster(
        tmp_path_factory.mktemp("spark-tiered"),
        nodes=2,
        node_configs={"retention.check.interval.ms": "100"},
        remote_storage=seaweedfs.storage_config(PREFIX),
        node_settings={
            "remote_log_manager_task_interval_ms": 100,
            "remote_log_manager_task_retry_backoff_ms": 100,
            "remote_log_manager_task_retry_backoff_max_ms": 400,
        },
    )
    cluster.admin.create_topic(
        TOPIC,
        PARTITIONS,
        2,
        configs={
            "remote.storage.enable": "true",
            "local.retention.bytes": "1",
            "retention.ms": "-1",
            "segment.bytes": str(32 * 1024),
            "index.interval.bytes": "1024",
            "file.delete.delay.ms": "0",
        },
    )

    def configured() -> bool:  # the leaders' logs have the topic's configs before any write
        try:
            logs = [cluster.leader_of(TOPIC, p).logs.get_log(TOPIC, p) for p in range(PARTITIONS)]
        except SeglogError:
            return False
        return all(log.config.segment_bytes == 32 * 1024 for log in logs)

    wait_for(configured, TIMEOUT_S, "the topic's configs on its logs")
    # Flushed every CHUNK records: a produce request's records go into one segment (a roll
    # happens between appends), so small requests make many segments.
    with Producer(cluster.address, linger_ms=0) as producer:
        for first in range(0, RECORDS * PARTITIONS, CHUNK):
            futures = [
                producer.send(
                    TOPIC,
                    b"value-%d-" % i + bytes([i % 251]) * (i % 90),
                    key=None if i % 5 == 0 else b"key-%d" % i,
                    partition=i % PARTITIONS,
                    headers=[("n", b"%d" % i)] if i % 3 else None,
                )
                for i in range(first, first + CHUNK)
            ]
            producer.flush(30)
            assert all(f.get(30).offset >= 0 for f in futures)
    metadata = RemoteLogMetadata(RemoteStore(cluster.remote_storage), cache_ms=0)

    def tiered(partition: int) -> bool:
        leader = cluster.leader_of(TOPIC, partition)
        log = leader.logs.get_log(TOPIC, partition)
        topic_id = leader.logs.topic_id(TOPIC, partition)
        start = log.log_start_offset
        return (
            start > RECORDS // 2
            and metadata.log_start_offset(topic_id, partition) == 0
            and metadata.remote_end_offset(topic_id, partition) == start - 1
        )

    def state() -> str:
        out = []
        for p in range(PARTITIONS):
            leader = cluster.leader_of(TOPIC, p)
            log = leader.logs.get_log(TOPIC, p)
            topic_id = leader.logs.topic_id(TOPIC, p)
            out.append(
                f"{p}: local start {log.log_start_offset}, end {log.log_end_offset}, segments "
                f"{len(log.segments)}, remote {metadata.log_start_offset(topic_id, p)}.."
                f"{metadata.remote_end_offset(topic_id, p)}"
            )
        return "; ".join(out)

    wait_for(
        lambda: all(tiered(p) for p in range(PARTITIONS)),
        TIMEOUT_S,
        "every partition's rolled segments copied and deleted locally",
        state,
        interval_s=0.2,
    )
    yield cluster
    cluster.close()


def _options(cluster, seaweedfs, **more):
    options = {"bootstrap": cluster.address, "subscribe": TOPIC, "includeHeaders": "true"}
    storage = seaweedfs.storage_config(PREFIX)
    direct = {
        "remoteStorage.endpoint": storage.endpoint_url,
        "remoteStorage.bucket": storage.bucket,
        "remoteStorage.accessKeyId": storage.access_key_id,
        "remoteStorage.secretAccessKey": storage.secret_access_key,
        "remoteStorage.prefix": PREFIX,
    }
    return {**options, **direct, **more}


def _rows(spark, options):
    reader = spark.read.format("seglog")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    rows = df.select(
        "partition",
        "offset",
        F.unix_micros("timestamp").alias("ts_us"),
        "timestampType",
        "key",
        "value",
        "headers",
    ).collect()
    return sorted(
        (r.partition, r.offset, r.ts_us, r.timestampType, r.key, r.value, repr(r.headers))
        for r in rows
    )


def test_the_plan_reads_copied_segments_from_the_store_and_the_tail_through_the_cluster(
    tiered_cluster, seaweedfs
):
    options = parse_read_options(
        _options(tiered_cluster, seaweedfs, maxBytesPerTask=str(64 * 1024)), streaming=False
    )
    planned = [p.read for p in SeglogBatchReader(options).partitions()]
    for partition in range(PARTITIONS):
        log = tiered_cluster.leader_of(TOPIC, partition).logs.get_log(TOPIC, partition)
        direct = sorted(
            (t.start, t.end)
            for t in planned
            if isinstance(t, RemoteRangeRead) and t.partition == partition
        )
        # The cluster's part: tasks of their own, or the last store task's tail.
        through = sorted(
            (t.start, t.end)
            for t in [*planned, *(getattr(t, "tail", None) for t in planned)]
            if isinstance(t, RangeRead) and t.partition == partition
        )
        # Several byte-balanced tasks over the copies, contiguous from 0, the last not a
        # sliver (one would join the task before it) ...
        assert len(direct) >= 3, direct
        last = max(
            (t for t in planned if isinstance(t, RemoteRangeRead) and t.partition == partition),
            key=lambda t: t.start,
        )
        assert sum(p.end_position - p.start_position for p in last.pieces) >= 64 * 1024 // 4
        assert direct[0][0] == 0
        if last.tail is not None:  # the store task reads on to the tail's end
            assert (last.end, last.tail.start) == (last.tail.end, last.pieces[-1].end_offset)
            direct[-1] = (direct[-1][0], last.tail.start)
        assert all(a[1] == b[0] for a, b in zip(direct, direct[1:], strict=False))
        # ... up to where the cluster's part starts, at or below the local log start (local
        # retention may have moved it on since the plan) and ending at the high watermark.
        assert through[0][0] == direct[-1][1] <= log.log_start_offset
        assert through[-1][1] == RECORDS


def test_a_direct_read_gives_the_rows_of_a_read_through_the_brokers(
    spark, tiered_cluster, seaweedfs
):
    through = _rows(
        spark, {"bootstrap": tiered_cluster.address, "subscribe": TOPIC, "includeHeaders": "true"}
    )
    assert [(p, o) for p, o, *_ in through] == [
        (p, o) for p in range(PARTITIONS) for o in range(RECORDS)
    ]
    direct = _rows(spark, _options(tiered_cluster, seaweedfs, maxBytesPerTask=str(64 * 1024)))
    assert direct == through
    # A range starting and ending inside copied segments, read straight from the store.
    ranged = _rows(
        spark,
        _options(
            tiered_cluster,
            seaweedfs,
            startingOffsets=json.dumps({TOPIC: {"0": 17, "1": 250}}),
            endingOffsets=json.dumps({TOPIC: {"0": 901, "1": 251}}),
        ),
    )
    assert ranged == [r for r in through if (r[0] == 0 and 17 <= r[1] < 901) or r[:2] == (1, 250)]


def test_a_task_cut_into_small_gets_builds_the_columns_the_brokers_read_gives(
    tiered_cluster, seaweedfs, monkeypatch
):
    # The default columns (no headers: the C decoder's path Spark is fastest on), read in
    # the worker's code in this process, with GETs of 1000 bytes: nearly every batch is cut
    # by a GET's end and must wait for the next, several GETs in flight. Each task's batches
    # equal the same offsets read through the brokers, column by column.
    monkeypatch.setattr(remote_reading, "CHUNK_BYTES", 1000)
    options = parse_read_options(
        _options(tiered_cluster, seaweedfs, includeHeaders="false", maxBytesPerTask="50000"),
        streaming=False,
    )
    planned = [p.read for p in SeglogBatchReader(options).partitions()]
    direct = [t for t in planned if isinstance(t, RemoteRangeRead)]
    template = _through(tiered_cluster, includeHeaders="false")
    assert len(direct) >= 2 * PARTITIONS, direct
    for task in direct:
        assert task.pieces[0].end_position - task.pieces[0].start_position > 3 * 1000
        through = dataclasses.replace(
            template, partition=task.partition, start=task.start, end=task.end
        )
        got = pa.Table.from_batches(list(read_remote_range(task))).combine_chunks()
        want = pa.Table.from_batches(list(read_range(through))).combine_chunks()
        assert got.num_rows == task.end - task.start
        assert got.column("offset").to_pylist() == list(range(task.start, task.end))
        assert got.equals(want)


def _through(cluster, **options) -> RangeRead:
    """A read through the brokers with these options, offsets to be filled in."""
    parsed = parse_read_options(
        {"bootstrap": cluster.address, "subscribe": TOPIC, **options}, streaming=False
    )
    return RangeRead(
        cluster.address,
        TOPIC,
        0,
        0,
        0,
        parsed.include_headers,
        parsed.fail_on_data_loss,
        parsed.request_timeout_ms,
        parsed.fetch_transport,
    )


@pytest.mark.parametrize("include_headers", ["false", "true"])
def test_a_small_local_tail_is_read_by_its_partitions_last_store_task(
    tiered_cluster, seaweedfs, include_headers
):
    # Tasks far bigger than the tail (under a quarter of maxBytesPerTask): one task per
    # partition, reading the copies from the store and then the tail through the cluster,
    # into the same batches (no short batch between the two). Its rows equal the brokers'.
    options = parse_read_options(
        _options(
            tiered_cluster,
            seaweedfs,
            includeHeaders=include_headers,
            maxBytesPerTask=str(64 * 1024 * 1024),
        ),
        streaming=False,
    )
    planned = [p.read for p in SeglogBatchReader(options).partitions()]
    assert sorted(type(t).__name__ + str(t.partition) for t in planned) == [
        f"RemoteRangeRead{p}" for p in range(PARTITIONS)
    ]
    template = _through(tiered_cluster, includeHeaders=include_headers)
    for task in planned:
        assert task.tail is not None
        assert (task.start, task.tail.start, task.tail.end) == (
            0,
            task.pieces[-1].end_offset,
            RECORDS,
        )
        assert task.end == RECORDS
        batches = list(read_remote_range(task))
        # Small first and last batches (columns.py): 3000 rows are batches of 1000 (a
        # produce request's 100 records may run past it; the last holds what is left),
        # the store's rows and the tail's in the same batches.
        sizes = [b.num_rows for b in batches]
        assert all(
            FIRST_ARROW_BATCH_ROWS <= n < FIRST_ARROW_BATCH_ROWS + 100 for n in sizes[:-1]
        ), sizes
        assert len(sizes) <= 3, sizes
        got = pa.Table.from_batches(batches)
        through = dataclasses.replace(template, partition=task.partition, end=RECORDS)
        assert got.equals(pa.Table.from_batches(list(read_range(through))))
    # Tasks a tail is not small beside keep it apart: it is the cluster's own task.
    options = dataclasses.replace(options, max_bytes_per_task=1024)
    planned = [p.read for p in SeglogBatchReader(options).partitions()]
    assert all(t.tail is None for t in planned if isinstance(t, RemoteRangeRead))
    assert {t.partition for t in planned if isinstance(t, RangeRead)} == set(range(PARTITIONS))


def test_a_plan_made_again_reads_only_the_metadata_listing_from_the_store(
    tiered_cluster, seaweedfs, monkeypatch
):
    # The planner's process keeps what it read (metadata records by ETag, offset indexes by
    # segment): the same plan again, with no GET of an index or a metadata record.
    options = parse_read_options(
        _options(tiered_cluster, seaweedfs, maxBytesPerTask=str(64 * 1024)), streaming=False
    )
    first = [p.read for p in SeglogBatchReader(options).partitions()]
    gets: list[str] = []
    real_get = RemoteStore.get

    def counted(self, key):
        gets.append(key)
        return real_get(self, key)

    monkeypatch.setattr(RemoteStore, "get", counted)
    assert [p.read for p in SeglogBatchReader(options).partitions()] == first
    assert gets == []
    # Bounded: with room for one index, one is kept, and the plan is the same.
    monkeypatch.setattr(remote_planning, "INDEX_CACHE_BYTES", 1)
    monkeypatch.setattr(remote_planning, "_index_cache", OrderedDict())
    monkeypatch.setattr(remote_planning, "_index_bytes", [0])
    assert [p.read for p in SeglogBatchReader(options).partitions()] == first
    assert len(remote_planning._index_cache) == 1
    assert [k for k in gets if k.endswith(OFFSET_INDEX)]


def test_the_tiered_guides_spark_snippet_reads_the_topic_from_the_store(
    spark, tiered_cluster, seaweedfs
):
    # docs/tiered-storage.md's read, as written but for this cluster's addresses, names and
    # keys: it must plan over the copies and read every record.
    guide = Path(__file__).resolve().parents[2] / "docs" / "tiered-storage.md"
    (snippet,) = re.findall(r"```python\n(df = .*?)```", guide.read_text(), re.DOTALL)
    storage = seaweedfs.storage_config(PREFIX)
    for written, here in (
        ("127.0.0.1:7070", tiered_cluster.address),
        ('"events"', f'"{TOPIC}"'),
        ("http://127.0.0.1:8333", storage.endpoint_url),
        (
            '"seglog")\n    .option("remoteStorage.accessKeyId", "seglog"',
            (
                f'"{storage.bucket}")\n    .option("remoteStorage.accessKeyId", '
                f'"{storage.access_key_id}"'
            ),
        ),
        ('.option("remoteStorage.prefix", "")', f'.option("remoteStorage.prefix", "{PREFIX}")'),
    ):
        assert written in snippet, written
        snippet = snippet.replace(written, here)
    scope = {"spark": spark, "secret": storage.secret_access_key}
    exec(snippet, scope)
    assert scope["df"].count() == RECORDS * PARTITIONS


def test_remote_storage_options_are_all_or_none():
    with pytest.raises(OptionError, match="missing: remotestorage.secretaccesskey"):
        parse_read_options(
            {
                "subscribe": "t",
                "remoteStorage.endpoint": "http://127.0.0.1:1",
                "remoteStorage.bucket": "b",
                "remoteStorage.accessKeyId": "k",
            },
            streaming=False,
        )
    with pytest.raises(OptionError, match="http"):
        parse_read_options(
            {
                "subscribe": "t",
                "remoteStorage.endpoint": "127.0.0.1:1",
                "remoteStorage.bucket": "b",
                "remoteStorage.accessKeyId": "k",
                "remoteStorage.secretAccessKey": "s",
            },
            streaming=False,
        )
