"""The page-view pipeline's topics (pipelines/pageviews) on a real cluster whose retention
check runs every 100 ms: the events carry event times from the past as their record
timestamps, and a retention check must not take them (it once emptied the backfill of the
pipeline's test whenever the shared cluster had been up past its first check)."""

from __future__ import annotations

from pipelines.pageviews.events import page_views
from pipelines.pageviews.jobs import Topics, create_topics, produce_events
from seglog.client.gateway import EARLIEST, LATEST, partition_offsets
from seglog.client.structs import TopicPartition
from tests.cluster import LocalCluster
from tests.waiting import wait_until

START_MS = 1_767_225_600_000  # the pipeline's: 2026-01-01, far past a 7-day retention
EVENTS = 50


def test_the_events_topic_keeps_records_with_past_event_times_through_retention(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, node_configs={"retention.check.interval.ms": "100"})
    try:
        topics = Topics(events="pv-events", per_minute="pv-per-minute")
        create_topics(cluster.address, topics, partitions=1)
        events = list(page_views(EVENTS, start_ms=START_MS, seed=1))
        produce_events(cluster.address, topics.events, events)
        # The same records in a topic of default retention: once a check has deleted them
        # there, one has run over the events topic as well.
        cluster.admin.create_topic("pv-control", 1)
        produce_events(cluster.address, "pv-control", events)

        def bounds(topic: str) -> tuple[int, int]:
            tp = TopicPartition(topic, 0)
            found = partition_offsets(cluster.client, {tp: EARLIEST})[tp].offset
            return found, partition_offsets(cluster.client, {tp: LATEST})[tp].offset

        assert wait_until(lambda: bounds("pv-control") == (EVENTS, EVENTS))
        assert bounds(topics.events) == (0, EVENTS)
    finally:
        cluster.close()
