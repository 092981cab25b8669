"""The page-view pipeline (pipelines/pageviews) on the shared session and cluster: its
streaming job's windows reach both sinks once each and never count more than was produced;
the backfill's figures equal the events' own, computed here without Spark."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

from pipelines.pageviews.events import page_views
from pipelines.pageviews.jobs import Topics, backfill, create_topics, produce_events, run_stream
from seglog.client.consumer import Consumer
from seglog.client.structs import TopicPartition
from tests.cluster import drain

START_MS = 1_767_225_600_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _minute(ms: int) -> int:
    return ms - ms % 60_000


def test_the_pipeline_streams_windows_to_both_sinks_and_the_backfill_agrees(
    spark, spark_cluster, topic_name, tmp_path
):
    topics = Topics(events=f"{topic_name}-views", per_minute=f"{topic_name}-per-minute")
    create_topics(spark_cluster.address, topics, partitions=2)
    # 1,500 events 200 ms apart: five minutes of windows in three micro-batches (plus the
    # one the watermark closes the last windows in); each micro-batch is a stateful
    # aggregation and two writes, where the time goes, not the events.
    events = list(page_views(1500, start_ms=START_MS, seed=5))
    produce_events(spark_cluster.address, topics.events, events)
    expected = Counter((_minute(e.event_time_ms), e.page) for e in events)

    run_stream(spark, spark_cluster.address, topics, tmp_path, max_per_trigger=500)
    parquet = {
        (_ms(r.start), r.page): r.views
        for r in spark.read.parquet(str(tmp_path / "per_minute.parquet"))
        .select("window.start", "page", "views")
        .collect()
    }
    with Consumer(spark_cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topics.per_minute, p) for p in range(2)])
        records = drain(consumer, len(parquet))
    from_topic = [json.loads(r.value) for r in records]
    assert parquet and len(from_topic) == len(parquet)  # each closed window once
    newest = max(e.event_time_ms for e in events)
    for window in from_topic:
        start_ms = _parse_ms(window["window_start"])
        key = (start_ms, window["page"])
        assert parquet[key] == window["views"]
        assert window["views"] <= expected[key]  # late events may be dropped, never added
        assert start_ms + 60_000 <= newest  # only windows the watermark closed
    assert sum(parquet.values()) >= 0.9 * sum(expected[k] for k in parquet)

    figures = backfill(spark, spark_cluster.address, topics.events, START_MS, newest + 1)
    got = {
        (_ms(r.start), r.page): r.views
        for r in figures.select("window.start", "page", "views").collect()
    }
    assert got == dict(expected)


def _ms(moment: datetime) -> int:
    """A datetime Spark handed back (naive, in the process's zone: UTC here) in whole ms."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(milliseconds=1)


def _parse_ms(text: str) -> int:
    return _ms(datetime.fromisoformat(text))
