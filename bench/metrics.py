"""Metrics' cost on the data path: produce and fetch throughput of a gateway and one storage
node (processes on loopback) with OpenTelemetry metrics exported over OTLP every second to a
receiver in this process, against the same with metrics off, the two taking turns.
"""

from __future__ import annotations

from collections.abc import Callable

from seglog.client.admin import Admin
from seglog.testing.otlp import OtlpReceiver

from .cluster import one_node_cluster
from .throughput import fetch_seconds, produce_seconds

RECORDS = 300_000
VALUE = b"m" * 100
SECRET = "bench-cluster-secret-0123456789abcdef"
ROUNDS = 3


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
                    with Admin(bootstrap) as admin:
                        admin.create_topic(topic, 1, 1)
                    produce[name].append(produce_seconds(bootstrap, topic, RECORDS, VALUE))
                    fetch[name].append(fetch_seconds(bootstrap, topic, RECORDS))
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
