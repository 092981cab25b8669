"""Metrics' cost on the data path: produce and fetch throughput of a gateway and one storage
node (processes on loopback) with OpenTelemetry metrics exported over OTLP every second to a
receiver in this process, against the same with metrics off, the two taking turns.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from seglog.client.consumer import Consumer
from seglog.client.gateway import GatewayClient
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.testing.otlp import OtlpReceiver

from .cluster import one_node_cluster

RECORDS = 300_000
VALUE = b"m" * 100
SECRET = "bench-cluster-secret-0123456789abcdef"
ROUNDS = 3


def _produce(bootstrap: str, topic: str) -> float:
    with Producer(bootstrap, linger_ms=5) as producer:
        start = time.perf_counter()
        for _ in range(0, RECORDS, 10_000):
            producer.send_many(topic, [VALUE] * 10_000, partition=0)
        producer.flush()
        return time.perf_counter() - start


def _fetch(bootstrap: str, topic: str) -> float:
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        start = time.perf_counter()
        seen = 0
        while seen < RECORDS:
            seen += len(consumer.poll(timeout_ms=1000, max_records=100_000))
        return time.perf_counter() - start


def run(report: Callable[..., None]) -> None:
    receiver = OtlpReceiver()
    metrics_on = {
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_METRIC_EXPORT_INTERVAL": "1000",
    }
    try:
        with (
            one_node_cluster(
                "seglog-bench-metrics-on-", [], 1, cluster_secret=SECRET, env=metrics_on
            ) as on,
            one_node_cluster("seglog-bench-metrics-off-", [], 1, cluster_secret=SECRET) as off,
        ):
            topics = iter(range(100))
            produce: dict[str, list[float]] = {"on": [], "off": []}
            fetch: dict[str, list[float]] = {"on": [], "off": []}
            for _ in range(ROUNDS):  # taking turns, so a slow moment lands on one side
                for name, bootstrap in (("on", on), ("off", off)):
                    topic = f"m-{next(topics)}"
                    with GatewayClient(bootstrap) as client:
                        client.create_topic(topic, 1, 1)
                    produce[name].append(_produce(bootstrap, topic))
                    fetch[name].append(_fetch(bootstrap, topic))
        exported = {p.name for p in receiver.points()}
        assert "seglog.bytes.in" in exported, "the metrics-on cluster exported nothing"
        mb = RECORDS * len(VALUE) / 1e6
        for what, times in (("produce", produce), ("fetch", fetch)):
            report(
                f"{what} with metrics on (MB/s of values)",
                mb / min(times["on"]),
                mb / min(times["off"]),
                "MB/s",
                0.95,
            )
    finally:
        receiver.close()
