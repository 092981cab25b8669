"""The scale group's reference for "produce p99 while topics are created": the same
measurement against Apache Kafka on the same machine (three KRaft brokers, each broker and
controller, RF3), so the seglog ratio is read beside what Kafka itself does on these cores.

One partition of a probe topic takes steady 1 KiB records, acks=all, from a producer in a
process of its own (bench.steady_producer --kafka: librdkafka); its p99 over a window with no
creations is set against its p99 while topics of `topic_partitions` are created back to back
up to `partitions` and until every new partition's ISR is full.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin

from devtools.apache_kafka import KafkaBrokers, installed

from .scale_probes import SteadyProduce, median_and_p90_moves, p99_ms

PROBE_TOPIC = "scale-probe"
CALL_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.5


@dataclass
class KafkaCreating:
    idle_p99_ms: float
    creating_p99_ms: float
    create_s: float
    samples: tuple[int, int]  # (idle, creating)
    failures: int
    moves: str  # p50 and p90, idle -> while creating

    @property
    def ratio(self) -> float:
        return self.creating_p99_ms / self.idle_p99_ms


def _create(
    admin: confluent_kafka.admin.AdminClient, name: str, partitions: int, replicas: int
) -> None:
    topic = confluent_kafka.admin.NewTopic(name, partitions, replicas)
    admin.create_topics([topic])[name].result(CALL_TIMEOUT_S)


def _not_full(admin: confluent_kafka.admin.AdminClient, topics: set[str]) -> set[str]:
    """Those of `topics` with a partition that has no leader or an ISR short of its replicas
    (or not described yet)."""
    if not topics:
        return set()
    request = confluent_kafka.TopicCollection(sorted(topics))
    waiting = set()
    for name, future in admin.describe_topics(request).items():
        try:
            description = future.result(CALL_TIMEOUT_S)
        except confluent_kafka.KafkaException:
            waiting.add(name)
            continue
        for part in description.partitions:
            if part.leader is None or len(part.isr) < len(part.replicas):
                waiting.add(name)
                break
    return waiting


def kafka_creating_p99(
    partitions: int,
    topic_partitions: int,
    rate_per_s: float,
    idle_s: float,
    deadline_s: float,
    brokers: int = 3,
) -> KafkaCreating | str:
    """The measurement, or why it could not be made; topics of min(3, brokers) replicas."""
    if not installed():
        return "Apache Kafka's jars are not installed (make kafka)"
    replicas = min(3, brokers)
    with (
        tempfile.TemporaryDirectory(prefix="seglog-bench-scale-kafka-") as root,
        KafkaBrokers(
            Path(root), brokers, configs={"min.insync.replicas": str(max(1, replicas - 1))}
        ) as kafka,
    ):
        # The admin client lives in the call: gone before the brokers stop (it would go on
        # reconnecting to them, loudly).
        return _measure(
            kafka.bootstrap, replicas, partitions, topic_partitions, rate_per_s, idle_s, deadline_s
        )


def _measure(
    bootstrap: str,
    replicas: int,
    partitions: int,
    topic_partitions: int,
    rate_per_s: float,
    idle_s: float,
    deadline_s: float,
) -> KafkaCreating | str:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    _create(admin, PROBE_TOPIC, 10, replicas)
    with SteadyProduce(bootstrap, PROBE_TOPIC, rate_per_s, kafka=True) as steady:
        if not steady.warmed_up(CALL_TIMEOUT_S, POLL_INTERVAL_S):
            return f"no record acknowledged by Kafka in {CALL_TIMEOUT_S:.0f} s"
        time.sleep(idle_s)
        idle = steady.window()
        started = time.monotonic()
        deadline = started + deadline_s
        created: set[str] = set()
        while len(created) * topic_partitions < partitions and time.monotonic() < deadline:
            name = f"scale-{len(created):04d}"
            _create(admin, name, topic_partitions, replicas)
            created.add(name)
        waiting = set(created)
        while (waiting := _not_full(admin, waiting)) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_S)
        create_s = time.monotonic() - started
        creating = steady.window()
        failures = steady.failures
    if waiting or len(created) * topic_partitions < partitions:
        return f"no full ISRs for {partitions:,} partitions in {deadline_s:.0f} s"
    return KafkaCreating(
        p99_ms(idle),
        p99_ms(creating),
        create_s,
        (len(idle), len(creating)),
        failures,
        median_and_p90_moves(idle, creating),
    )
