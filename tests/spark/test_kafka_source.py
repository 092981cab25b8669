"""Spark's own Kafka source and sink (spark-sql-kafka-0-10, format "kafka"), unmodified and
with no seglog code in the job, against the gateway's Kafka listener: a batch write lands in
the topic as Spark's Kafka sink places it, and a batch read returns what the gRPC producer
wrote, with Spark's Kafka columns (offsets, partitions, timestamps, headers)."""

from __future__ import annotations

import datetime

import pytest

from devtools import apache_kafka
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from tests.cluster import drain


@pytest.fixture(scope="module", autouse=True)
def connector_installed() -> None:
    """`make kafka` (run by `make test`) installs Spark's Kafka connector: missing, these
    tests fail rather than skip."""
    assert apache_kafka.spark_kafka_installed(), apache_kafka.INSTALL_HINT


BASE_TS = 1_700_000_000_000


def test_spark_kafka_sink_writes_rows_the_grpc_consumer_reads(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 3)
    rows = [(f"user-{i % 11}", f"view-{i}") for i in range(600)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(2)
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", spark_cluster.kafka_address)
        .option("topic", topic_name)
        .save()
    )
    with Consumer(spark_cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic_name, p) for p in range(3)])
        records = drain(consumer, 600)
    assert sorted((r.key, r.value) for r in records) == sorted(
        (k.encode(), v.encode()) for k, v in rows
    )
    # Kafka's default partitioner (murmur2 of the key): one key, one partition.
    partitions_of_key: dict[bytes, set[int]] = {}
    for record in records:
        partitions_of_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(found) == 1 for found in partitions_of_key.values())


def test_spark_kafka_source_reads_what_the_grpc_producer_wrote(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 2)
    with Producer(spark_cluster.address, linger_ms=5) as producer:
        futures = [
            producer.send(
                topic_name,
                b"value-%d" % i,
                key=b"key-%d" % i,
                partition=i % 2,
                timestamp_ms=BASE_TS + i,
                headers=[("n", b"%d" % i)],
            )
            for i in range(400)
        ]
        for future in futures:
            future.get(timeout=30)
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", spark_cluster.kafka_address)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
    )
    got = sorted(df.collect(), key=lambda row: (row.partition, row.offset))
    assert len(got) == 400
    for row in got:
        i = int(bytes(row.value).split(b"-")[1])
        assert row.topic == topic_name
        assert (row.partition, row.offset) == (i % 2, i // 2)
        assert bytes(row.key) == b"key-%d" % i
        assert row.timestamp == datetime.datetime.fromtimestamp((BASE_TS + i) / 1000)
        assert [(h.key, bytes(h.value)) for h in row.headers] == [("n", b"%d" % i)]


def test_spark_kafka_source_reads_an_offset_range(spark, spark_cluster, topic_name):
    spark_cluster.admin.create_topic(topic_name, 1)
    with Producer(spark_cluster.address, linger_ms=5) as producer:
        for future in [producer.send(topic_name, b"v%d" % i, partition=0) for i in range(100)]:
            future.get(timeout=30)
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", spark_cluster.kafka_address)
        .option("subscribe", topic_name)
        .option("startingOffsets", f'{{"{topic_name}": {{"0": 40}}}}')
        .option("endingOffsets", f'{{"{topic_name}": {{"0": 60}}}}')
        .load()
    )
    assert sorted(row.offset for row in df.select("offset").collect()) == list(range(40, 60))


def test_spark_kafka_stream_reads_available_records_and_resumes_from_its_checkpoint(
    spark, spark_cluster, topic_name, tmp_path
):
    spark_cluster.admin.create_topic(topic_name, 2)

    def produce(start, count):
        with Producer(spark_cluster.address, linger_ms=5) as producer:
            futures = [
                producer.send(topic_name, b"v%d" % i, partition=i % 2)
                for i in range(start, start + count)
            ]
            for future in futures:
                future.get(timeout=30)

    def run_available_now():
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", spark_cluster.kafka_address)
            .option("subscribe", topic_name)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("CAST(value AS STRING) AS value")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()

    produce(0, 150)
    run_available_now()
    produce(150, 50)
    run_available_now()  # only the new records: the checkpoint holds Kafka offsets
    values = [row.value for row in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(values) == sorted(f"v{i}" for i in range(200))
