"""The pipeline's three steps: produce the events, the streaming aggregation, the backfill."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from seglog.client.admin import Admin
from seglog.client.producer import Producer
from seglog.errors import TopicAlreadyExistsError
from seglog.spark.worker_start import (
    WorkerStartTimedOut,
    explain,
    retrying,
    worker_did_not_connect,
)

from .events import PageView

EVENT_SCHEMA = StructType(
    [
        StructField("user_id", StringType()),
        StructField("page", StringType()),
        StructField("referrer", StringType()),
        StructField("duration_ms", LongType()),
        StructField("event_time", LongType()),
    ]
)
WINDOW = "1 minute"
WATERMARK = "30 seconds"  # events later than this behind the newest are dropped


@dataclass(frozen=True)
class Topics:
    events: str = "pageviews"
    per_minute: str = "pageviews-per-minute"


# The events' record timestamps are their event times, fixed in the past so that a run is
# reproducible: past the default retention.ms (7 days), the next retention check (every 5
# minutes) deleted the whole topic, and the backfill found nothing. Kept until deleted, as a
# topic of historical events is. (The windows are written with the time they are written.)
EVENTS_TOPIC_CONFIGS = {"retention.ms": "-1"}


def create_topics(bootstrap: str, topics: Topics, partitions: int = 3) -> None:
    with Admin(bootstrap) as admin:
        for name, configs in ((topics.events, EVENTS_TOPIC_CONFIGS), (topics.per_minute, None)):
            try:
                admin.create_topic(name, partitions, configs=configs)
            except TopicAlreadyExistsError:
                pass


def produce_events(bootstrap: str, topic: str, events: list[PageView]) -> int:
    """Keyed by user; the record timestamp is the event time, so the backfill can pick a
    time range through the time index."""
    with Producer(bootstrap, linger_ms=20, compression_type="lz4") as producer:
        futures = [
            producer.send(topic, e.to_json(), key=e.user_id.encode(), timestamp_ms=e.event_time_ms)
            for e in events
        ]
        producer.flush()
        for future in futures:
            future.get()
    return len(events)


def parsed(raw: DataFrame) -> DataFrame:
    """The seglog source's rows -> page views with an event-time column."""
    return (
        raw.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("event_time"))
    )


def per_minute(views: DataFrame) -> DataFrame:
    return views.groupBy(F.window("event_time", WINDOW).alias("window"), "page").agg(
        F.count("*").alias("views"),
        F.approx_count_distinct("user_id").alias("approx_users"),
        F.sum("duration_ms").alias("total_duration_ms"),
    )


def as_records(aggregates: DataFrame) -> DataFrame:
    """Aggregates as the sink's key/value columns: key the page, value JSON."""
    flat = aggregates.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "page",
        "views",
        "approx_users",
        "total_duration_ms",
    )
    return flat.select(
        F.col("page").cast("binary").alias("key"),
        F.to_json(F.struct(*flat.columns)).alias("value"),
    )


def run_stream(
    spark: SparkSession,
    bootstrap: str,
    topics: Topics,
    workdir: Path,
    *,
    max_per_trigger: int,
    attempts: int = 3,
) -> Any:
    """Read what the events topic holds now (availableNow, in micro-batches of at most
    `max_per_trigger` records), aggregate closed windows, write each micro-batch's windows
    to the per-minute topic and to Parquet. Returns the finished query; run it again and it
    resumes from its checkpoint. A start that meets Spark's fixed 10 s for the source's Python
    worker (a busy machine: seglog.spark.worker_start) is retried from the checkpoint, up to
    `attempts` starts in all; then WorkerStartTimedOut says what to do."""
    for attempt in range(1, attempts + 1):
        try:
            return _stream_once(spark, bootstrap, topics, workdir, max_per_trigger)
        except Exception as failed:
            if not worker_did_not_connect(failed):
                raise
            if attempt == attempts:
                raise WorkerStartTimedOut(explain(attempts)) from None
            print(retrying(attempt + 1, attempts), file=sys.stderr, flush=True)
    raise ValueError(f"attempts must be at least 1, not {attempts}")


def _stream_once(
    spark: SparkSession, bootstrap: str, topics: Topics, workdir: Path, max_per_trigger: int
) -> Any:
    raw = (
        spark.readStream.format("seglog")
        .option("bootstrap", bootstrap)
        .option("subscribe", topics.events)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load()
    )
    windows = per_minute(parsed(raw).withWatermark("event_time", WATERMARK))
    parquet_path = str(workdir / "per_minute.parquet")

    def write_both(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            as_records(batch).write.format("seglog").mode("append").option(
                "bootstrap", bootstrap
            ).option("topic", topics.per_minute).save()
            batch.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(parquet_path)
        finally:
            batch.unpersist()

    query = (
        windows.writeStream.outputMode("append")
        .foreachBatch(write_both)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .queryName("pageviews_per_minute")
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    return query


def backfill(
    spark: SparkSession, bootstrap: str, topic: str, start_ms: int, end_ms: int
) -> DataFrame:
    """Per-minute figures for the events of [start_ms, end_ms), re-read from the topic by
    record time (through the time index), with no watermark: every window, late events
    included."""
    ending = {topic: {str(p): end_ms for p in topic_partitions(bootstrap, topic)}}
    raw = (
        spark.read.format("seglog")
        .option("bootstrap", bootstrap)
        .option("subscribe", topic)
        .option("startingTimestamp", str(start_ms))
        .option("startingOffsetsByTimestampStrategy", "latest")
        .option("endingOffsetsByTimestamp", json.dumps(ending))
        .load()
    )
    return per_minute(parsed(raw))


def topic_partitions(bootstrap: str, topic: str) -> list[int]:
    with Admin(bootstrap) as admin:
        (described,) = admin.describe_topics([topic])
        return [p.partition for p in described.partitions]
