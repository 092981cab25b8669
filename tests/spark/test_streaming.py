"""Structured Streaming with the seglog source and sink: offsets in Spark's checkpoint, exactly
once across restarts, new partitions, maxOffsetsPerTrigger with availableNow, a batch planned
but not committed read again identically, data loss, and a seglog-to-seglog stream."""

from __future__ import annotations

import json

import pytest
from pyspark.errors import PySparkException

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from tests.cluster import drain


def _produce(cluster, topic, values, *, partitions):
    with Producer(cluster.address, linger_ms=5) as producer:
        futures = [
            producer.send(topic, v, key=b"k%d" % i, partition=i % partitions)
            for i, v in enumerate(values)
        ]
        for f in futures:
            f.get(timeout=30)


def _stream(spark, cluster, topic, **options):
    reader = (
        spark.readStream.format("seglog")
        .option("bootstrap", cluster.address)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _run_recording(df, checkpoint, batches):
    """One availableNow run; each micro-batch's id and (partition, offset) rows recorded."""

    def record(batch_df, batch_id):
        rows = sorted(
            (r.partition, r.offset) for r in batch_df.select("partition", "offset").collect()
        )
        batches.append((batch_id, rows))

    query = (
        df.writeStream.foreachBatch(record)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    if query.exception() is not None:
        raise query.exception()


def test_available_now_runs_read_every_record_exactly_once(
    spark, spark_cluster, topic_name, tmp_path
):
    spark_cluster.admin.create_topic(topic_name, 2)
    _produce(spark_cluster, topic_name, [b"a%d" % i for i in range(300)], partitions=2)
    batches = []
    _run_recording(_stream(spark, spark_cluster, topic_name), tmp_path / "ck", batches)
    first_run = [row for _, rows in batches for row in rows]
    assert len(first_run) == 300
    # More records, and a partition that did not exist: the next run reads only them.
    spark_cluster.admin.create_partitions(topic_name, 3)
    _produce(spark_cluster, topic_name, [b"b%d" % i for i in range(150)], partitions=3)
    _run_recording(_stream(spark, spark_cluster, topic_name), tmp_path / "ck", batches)
    everything = [row for _, rows in batches for row in rows]
    assert len(everything) == len(set(everything)) == 450
    assert {p for p, _ in everything} == {0, 1, 2}
    written = [p for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit()]
    offsets_file = max(written, key=lambda p: int(p.name))
    checkpointed = json.loads(offsets_file.read_text().splitlines()[-1])
    assert checkpointed == {topic_name: {"0": 200, "1": 200, "2": 50}}


def test_max_offsets_per_trigger_cuts_available_now_into_batches(
    spark, spark_cluster, topic_name, tmp_path
):
    spark_cluster.admin.create_topic(topic_name, 2)
    _produce(spark_cluster, topic_name, [b"x%d" % i for i in range(1000)], partitions=2)
    batches = []
    df = _stream(spark, spark_cluster, topic_name, maxOffsetsPerTrigger="300")
    _run_recording(df, tmp_path / "ck", batches)
    sizes = [len(rows) for _, rows in batches if rows]
    assert sum(sizes) == 1000
    assert max(sizes) <= 300 and len(sizes) >= 4


def test_a_batch_planned_but_not_committed_is_read_again_identically(
    spark, spark_cluster, topic_name, tmp_path
):
    spark_cluster.admin.create_topic(topic_name, 2)
    _produce(spark_cluster, topic_name, [b"x%d" % i for i in range(400)], partitions=2)
    checkpoint = tmp_path / "ck"
    first = []
    _run_recording(_stream(spark, spark_cluster, topic_name), checkpoint, first)
    last_id, last_rows = first[-1]
    # As if the query died after planning its last batch and before committing it.
    (checkpoint / "commits" / str(last_id)).unlink()
    (checkpoint / "commits" / f".{last_id}.crc").unlink()  # Hadoop's checksum beside it
    _produce(spark_cluster, topic_name, [b"y%d" % i for i in range(100)], partitions=2)
    again = []
    _run_recording(_stream(spark, spark_cluster, topic_name), checkpoint, again)
    assert again[0] == (last_id, last_rows)
    later = [row for _, rows in again[1:] for row in rows]
    assert len(later) == 100 and not set(later) & set(last_rows)


def test_records_removed_while_a_stream_is_stopped(spark, spark_cluster, topic_name, tmp_path):
    spark_cluster.admin.create_topic(topic_name, 1, replication_factor=1)
    _produce(spark_cluster, topic_name, [b"x%d" % i for i in range(50)], partitions=1)
    checkpoint = tmp_path / "ck"
    batches = []
    _run_recording(_stream(spark, spark_cluster, topic_name), checkpoint, batches)
    _produce(spark_cluster, topic_name, [b"y%d" % i for i in range(50)], partitions=1)
    spark_cluster.log(topic_name, 0).delete_records_before(70)  # 50..69 never read
    with pytest.raises(PySparkException, match="failOnDataLoss"):
        _run_recording(_stream(spark, spark_cluster, topic_name), checkpoint, [])
    skipped = []
    df = _stream(spark, spark_cluster, topic_name, failOnDataLoss="false")
    _run_recording(df, checkpoint, skipped)
    assert [o for _, rows in skipped for _, o in rows] == list(range(70, 100))


@pytest.mark.long  # the other streaming reads stay in make test
def test_a_stream_from_one_topic_into_another(spark, spark_cluster, topic_name, tmp_path):
    source, sink = topic_name, f"{topic_name}-out"
    spark_cluster.admin.create_topic(source, 2)
    spark_cluster.admin.create_topic(sink, 2)
    _produce(spark_cluster, source, [b"m%d" % i for i in range(200)], partitions=2)
    query = (
        _stream(spark, spark_cluster, source)
        .selectExpr("key", "upper(cast(value as string)) as value")
        .writeStream.format("seglog")
        .option("bootstrap", spark_cluster.address)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    with Consumer(spark_cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(sink, 0), TopicPartition(sink, 1)])
        got = drain(consumer, 200)
    assert sorted(r.value for r in got) == sorted(b"M%d" % i for i in range(200))
