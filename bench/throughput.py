"""Produce and fetch timings through a gateway, shared by the groups that compare one setup
of it against another (metrics on/off, the registry on etcd/file)."""

from __future__ import annotations

import time

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition


def produce_seconds(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    """Seconds to send `records` copies of `value` to partition 0 and have them acknowledged."""
    with Producer(bootstrap, linger_ms=5) as producer:
        start = time.perf_counter()
        for _ in range(0, records, 10_000):
            producer.send_many(topic, [value] * 10_000, partition=0)
        producer.flush()
        return time.perf_counter() - start


def fetch_seconds(bootstrap: str, topic: str, records: int) -> float:
    """Seconds to read `records` records of partition 0 from its start."""
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        start = time.perf_counter()
        seen = 0
        while seen < records:
            seen += len(consumer.poll_records(timeout_ms=1000, max_records=100_000))
        return time.perf_counter() - start
