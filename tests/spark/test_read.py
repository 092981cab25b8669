"""Batch reads through the seglog data source against a real cluster: the rows equal what the
CLI consumes, options as Spark's Kafka source, byte-balanced tasks, data loss, bad options,
and a cluster that is down."""

from __future__ import annotations

import base64
import json
import socket

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from seglog.client.producer import Producer
from seglog.spark import register
from tests.cluster import run_cli

BASE_TS = 1_700_000_000_000


def _load(spark, cluster, **options):
    reader = spark.read.format("seglog").option("bootstrap", cluster.address)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _produce(cluster, topic, count, *, partitions=None, headers=True, value_size=None):
    with Producer(cluster.address, linger_ms=5) as producer:
        futures = []
        for i in range(count):
            value = b"value-%d" % i if value_size is None else bytes([i % 251]) * value_size(i)
            futures.append(
                producer.send(
                    topic,
                    value,
                    key=None if i % 7 == 0 else b"key-%d" % i,
                    partition=None if partitions is None else i % partitions,
                    timestamp_ms=BASE_TS + i,
                    headers=[("n", b"%d" % i), ("empty", None)] if headers else None,
                )
            )
        return [f.get(timeout=30) for f in futures]


def test_a_batch_read_equals_what_the_cli_consumes(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 3)
    _produce(spark_cluster, topic_name, 900, partitions=3)
    df = _load(spark, spark_cluster, subscribe=topic_name, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    rows = df.select(
        "topic",
        "partition",
        "offset",
        (F.unix_micros("timestamp")).alias("ts_us"),
        "timestampType",
        "key",
        "value",
        "headers",
    ).collect()
    spark_side = sorted(
        (
            r.topic,
            r.partition,
            r.offset,
            r.ts_us // 1000,
            r.timestampType,
            r.key,
            r.value,
            [(h.key, h.value) for h in r.headers],
        )
        for r in rows
    )
    done = run_cli(
        "consume",
        topic_name,
        "--from-beginning",
        "--json",
        "--max-messages",
        "900",
        "--timeout-ms",
        "10000",
        bootstrap=spark_cluster.address,
    )
    assert done.returncode == 0, done.stderr
    cli_side = sorted(_from_json_line(line) for line in done.stdout.decode().splitlines())
    assert len(cli_side) == 900
    assert spark_side == cli_side


def _decoded(text, encoding):
    if text is None:
        return None
    return base64.b64decode(text) if encoding == "base64" else text.encode()


def _from_json_line(line):
    r = json.loads(line)
    return (
        r["topic"],
        r["partition"],
        r["offset"],
        r["timestamp"],
        0 if r["timestamp_type"] == "CreateTime" else 1,
        _decoded(r["key"], r["key_encoding"]),
        _decoded(r["value"], r["value_encoding"]),
        [(h["key"], _decoded(h["value"], h["value_encoding"])) for h in r["headers"]],
    )


def test_offsets_timestamps_assign_and_pattern_options(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 2)
    _produce(spark_cluster, topic_name, 200, partitions=2, headers=False)
    # Partition p holds offsets 0..99 with timestamps BASE_TS + 2*offset + p.
    offsets = json.dumps({topic_name: {"0": 10, "1": -2}})
    ending = json.dumps({topic_name: {"0": 20, "1": 5}})
    df = _load(
        spark, spark_cluster, subscribe=topic_name, startingOffsets=offsets, endingOffsets=ending
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(0, 5)]
    assign = json.dumps({topic_name: [1]})
    df = _load(spark, spark_cluster, assign=assign, startingTimestamp=str(BASE_TS + 101))
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(50, 100))
    by_time = json.dumps({topic_name: {"0": BASE_TS + 100, "1": BASE_TS + 199}})
    end_by_time = json.dumps({topic_name: {"0": BASE_TS + 110, "1": BASE_TS + 10_000}})
    df = _load(
        spark,
        spark_cluster,
        subscribe=topic_name,
        startingOffsetsByTimestamp=by_time,
        endingOffsetsByTimestamp=end_by_time,
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(50, 55)] + [(1, 99)]
    pattern = f"{topic_name}|nothing-.*"
    assert _load(spark, spark_cluster, subscribePattern=pattern).count() == 200
    # A subscribed topic that does not exist reads nothing, as Kafka's subscribe.
    assert _load(spark, spark_cluster, subscribe=f"{topic_name}-missing").count() == 0


def test_tasks_are_cut_by_bytes_on_skewed_partitions(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 1, configs={"segment.bytes": str(1 << 20)})
    # Runs of 100-byte and 10,000-byte records: sizes vary 100x, so equal offset counts
    # would be far from equal bytes.
    sizes = [100 if (i // 150) % 2 == 0 else 10_000 for i in range(1200)]
    _produce(spark_cluster, topic_name, 1200, value_size=lambda i: sizes[i], headers=False)
    df = _load(spark, spark_cluster, subscribe=topic_name, minPartitions="6")
    assert df.rdd.getNumPartitions() >= 6
    per_task = (
        df.withColumn("task", F.spark_partition_id())
        .groupBy("task")
        .agg(F.sum(F.length("value")).alias("bytes"), F.count("*").alias("rows"))
        .collect()
    )
    task_bytes = sorted(r.bytes for r in per_task)
    assert sum(r.rows for r in per_task) == 1200
    assert task_bytes[-1] <= 1.25 * task_bytes[0], task_bytes
    # With the default (one task per partition up to maxBytesPerTask), one task.
    assert _load(spark, spark_cluster, subscribe=topic_name).rdd.getNumPartitions() == 1


def test_records_removed_before_they_are_read(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 1, replication_factor=1)
    _produce(spark_cluster, topic_name, 100, headers=False)
    spark_cluster.log(topic_name, 0).delete_records_before(40)
    offsets = json.dumps({topic_name: {"0": 0}})
    with pytest.raises(PySparkException, match="failOnDataLoss"):
        _load(spark, spark_cluster, subscribe=topic_name, startingOffsets=offsets).count()
    df = _load(
        spark, spark_cluster, subscribe=topic_name, startingOffsets=offsets, failOnDataLoss="false"
    )
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(40, 100))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "t", "bogus": "1"}, "bogus"),
        ({}, "subscribe"),
        ({"subscribe": "t", "assign": '{"t": [0]}'}, "assign"),
        ({"subscribe": "t", "minPartitions": "zero"}, "minPartitions"),
        ({"subscribe": "t", "startingOffsets": "{not json"}, "startingOffsets"),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"assign": '{"t": ["a"]}'}, "assign"),
        ({"subscribePattern": "("}, "subscribePattern"),
    ],
)
def test_a_bad_option_fails_at_load_naming_it(spark, spark_cluster, options, named):
    with pytest.raises(PySparkException, match=named):
        _load(spark, spark_cluster, **options)


def test_batch_only_and_stream_only_options_are_refused(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 1)
    with pytest.raises(PySparkException, match="maxOffsetsPerTrigger"):
        _load(spark, spark_cluster, subscribe=topic_name, maxOffsetsPerTrigger="5").count()
    with pytest.raises(PySparkException, match="latest"):
        _load(spark, spark_cluster, subscribe=topic_name, startingOffsets="latest").count()
    stream = (
        spark.readStream.format("seglog")
        .option("bootstrap", spark_cluster.address)
        .option("subscribe", topic_name)
        .option("endingOffsets", "latest")
        .load()
    )
    with pytest.raises(PySparkException, match="endingOffsets"):
        stream.writeStream.format("noop").start().awaitTermination(30)


def test_a_cluster_that_is_down_fails_clearly_and_quickly(spark):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"  # nobody listens once closed
    df = (
        spark.read.format("seglog")
        .option("bootstrap", closed)
        .option("subscribe", "t")
        .option("requestTimeoutMs", "2000")
        .load()
    )
    with pytest.raises(PySparkException, match="(?i)unavailable|connect"):
        df.count()


def test_sql_view_and_explicit_registration(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 1)
    _produce(spark_cluster, topic_name, 30, headers=False)
    register(spark)  # registering again by hand is harmless
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW events USING seglog OPTIONS "
        f"(bootstrap '{spark_cluster.address}', subscribe '{topic_name}')"
    )
    assert spark.sql("SELECT count(*) AS n, max(offset) AS last FROM events").first() == (30, 29)
