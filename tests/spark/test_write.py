"""Batch writes through the seglog sink: Spark's Kafka sink columns, Kafka's keyed placement,
a write read back, save modes, and a failing write failing the job with the producer's
error."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest
from pyspark.errors import PySparkException

from seglog.client.consumer import Consumer
from seglog.client.partitioner import partition_for_key
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from tests.cluster import drain

UTC = datetime.UTC


def _read_all(cluster, topic, partitions, expected):
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        return drain(consumer, expected)


def _writer(df, cluster, **options):
    writer = df.write.format("seglog").mode("append").option("bootstrap", cluster.address)
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def test_keyed_rows_land_where_kafka_puts_them_and_read_back(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 4)
    rows = [(f"user-{i % 37}".encode(), f"view-{i}") for i in range(2000)]
    df = spark.createDataFrame(rows, "key binary, value string").repartition(3)
    _writer(df, spark_cluster, topic=topic_name).save()
    got = _read_all(spark_cluster, topic_name, 4, 2000)
    assert sorted((r.key, r.value) for r in got) == sorted((k, v.encode()) for k, v in rows)
    for record in got:
        assert record.partition == partition_for_key(record.key, 4)
    # And through the source: the same rows, keys in the partitions Kafka would choose.
    back = (
        spark.read.format("seglog")
        .option("bootstrap", spark_cluster.address)
        .option("subscribe", topic_name)
        .load()
        .collect()
    )
    assert sorted((r.key, r.value) for r in back) == sorted((k, v.encode()) for k, v in rows)


def test_topic_partition_headers_and_timestamp_columns(spark, spark_cluster, topic_name):
    other = f"{topic_name}-other"
    spark_cluster.admin.create_topic(topic_name, 2)
    spark_cluster.admin.create_topic(other, 2)
    stamp = datetime.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    df = spark.createDataFrame(
        [
            (b"v0", None, 1, [("trace", b"t0")], stamp),
            (b"v1", other, 0, [], stamp),
            (b"v2", None, 1, [("a", None), ("b", b"2")], None),
        ],
        "value binary, topic string, partition int, "
        "headers array<struct<key: string, value: binary>>, timestamp timestamp",
    )
    _writer(df, spark_cluster, topic=topic_name).save()
    mine = _read_all(spark_cluster, topic_name, 2, 2)
    assert sorted((r.value, r.partition, r.headers) for r in mine) == [
        (b"v0", 1, (("trace", b"t0"),)),
        (b"v2", 1, (("a", None), ("b", b"2"))),
    ]
    stamped = next(r for r in mine if r.value == b"v0")
    assert stamped.timestamp_ms == 1_714_564_800_123
    (moved,) = _read_all(spark_cluster, other, 2, 1)
    assert (moved.value, moved.partition) == (b"v1", 0)


def test_save_modes_and_columns_the_sink_cannot_write(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 1)
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(PySparkException, match="append"):
        _writer(df, spark_cluster, topic=topic_name).mode("overwrite").save()
    with pytest.raises(PySparkException, match="value"):
        _writer(
            spark.createDataFrame([(b"k",)], "key binary"), spark_cluster, topic=topic_name
        ).save()
    with pytest.raises(PySparkException, match="topic"):
        _writer(df, spark_cluster).save()
    with pytest.raises(PySparkException, match="partition"):
        bad = spark.createDataFrame([(b"v", "one")], "value binary, partition string")
        _writer(bad, spark_cluster, topic=topic_name).save()
    with pytest.raises(PySparkException, match="bogus"):
        _writer(df, spark_cluster, topic=topic_name, bogus="1").save()
    (end,) = spark_cluster.client.list_offsets(topic_name, {0: -1}).values()
    assert end.offset == 0  # nothing was written


def test_a_failing_write_fails_the_job_with_the_producers_error(spark, spark_cluster, topic_name):
    df = spark.createDataFrame([(b"v%d" % i,) for i in range(10)], "value binary")
    # A producer waits max_block_ms for a topic to appear (Kafka's 60 s by default): the job
    # fails with the producer's error once that shorter wait is spent.
    with pytest.raises(PySparkException, match="(?i)unknown topic|does not exist"):
        _writer(
            df, spark_cluster, topic=f"{topic_name}-missing", **{"producer.max_block_ms": "1500"}
        ).save()
    spark_cluster.admin.create_topic(topic_name, 2)
    with pytest.raises(PySparkException, match="partition 5"):
        bad = spark.createDataFrame([(b"v", 5)], "value binary, partition int")
        _writer(bad, spark_cluster, topic=topic_name).save()
    # Producer settings pass through (Spark's kafka.* options' role).
    _writer(
        df, spark_cluster, topic=topic_name, **{"producer.acks": "all", "producer.linger_ms": "1"}
    ).save()
    assert len(_read_all(spark_cluster, topic_name, 2, 10)) == 10


def test_the_readmes_spark_snippet_runs_as_written(spark, spark_cluster):
    # The README's example reads `orders` and writes `shouted`, which it creates first.
    readme = (Path(__file__).resolve().parents[2] / "docs" / "spark.md").read_text()
    section = readme.split("## Spark\n", 1)[1].split("\n## ", 1)[0]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    if "orders" not in spark_cluster.admin.list_topics():
        spark_cluster.admin.create_topic("orders", 3)
    with Producer(spark_cluster.address) as producer:
        for i in range(5):
            producer.send("orders", b"paid-%d" % i, key=b"o-%d" % i)
    exec(snippet.replace("127.0.0.1:7070", spark_cluster.address), {"spark": spark})
    with Consumer(spark_cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([("shouted", p) for p in consumer.partitions_for("shouted")])
        got = drain(consumer, 5)
    assert sorted(r.value for r in got) == [b"PAID-%d" % i for i in range(5)]
