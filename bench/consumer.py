"""Consumer benchmarks in steady state: seglog's Consumer through a gateway and a storage node
(separate processes) beside confluent-kafka (librdkafka) against its in-process mock cluster,
reading the same records in the same run.

Both sides are timed from the first record received to the last, so the figure is the steady
rate, not start-up; the time from `assign` to the first record is reported on its own (as a
rate, 1/s, so that higher is better like every other figure). confluent-kafka is measured
twice: its `poll()` loop and its `consume(num_messages=10000, timeout=0)` batch loop. Every
loop touches each value. The mock keeps only about 5 MiB per partition of its four
auto-created partitions, so each shape reads back what the mock kept (about 120 000 records
of 100 B); each figure is its side's best of 3 runs, the sides taking turns.

Shapes: 100-byte values uncompressed (the targets), then keyed records with two headers, and
lz4 and zstd batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import confluent_kafka

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition

from .cluster import one_node_cluster
from .timing import best_in_turns

PARTITIONS = 4  # what the mock cluster auto-creates
PRODUCED = 150_000  # the mock keeps fewer: each side reads what the mock kept
VALUE = b"v" * 100
HEADERS = [("trace", b"0123456789abcdef"), ("source", b"bench")]
ROUNDS = 3
BATCH_MESSAGES = 10_000


class Shape:
    def __init__(self, name: str, compression: str, keyed: bool) -> None:
        self.name = name
        self.compression = compression
        self.keyed = keyed

    def key(self, i: int) -> bytes | None:
        return b"customer-%d" % (i % 1000) if self.keyed else None

    def headers(self) -> list[tuple[str, bytes]] | None:
        return HEADERS if self.keyed else None


SHAPES = [
    Shape("100 B, none", "none", False),
    Shape("100 B, key + 2 headers", "none", True),
    Shape("100 B, lz4", "lz4", False),
    Shape("100 B, zstd", "zstd", False),
]


class Timing:
    """Seconds from `assign` to the first record, and the steady rate after it."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None
        self.last = 0.0
        self.count = 0

    def got(self, records: int) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.last = now
        self.count += records

    @property
    def first_record_s(self) -> float:
        assert self.first is not None
        return self.first - self.started

    @property
    def steady_s(self) -> float:
        """Seconds per record after the first, over the rest."""
        assert self.first is not None and self.count > 1
        return (self.last - self.first) / (self.count - 1)


def _mock_fill(shape: Shape) -> tuple[confluent_kafka.Producer, str, int]:
    producer = confluent_kafka.Producer(
        {
            "test.mock.num.brokers": 1,
            "linger.ms": 5,
            "batch.size": 65536,
            "compression.type": shape.compression,
            "log_level": 3,
        }
    )
    metadata = producer.list_topics(timeout=10)
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    for i in range(PRODUCED):
        while True:
            try:
                producer.produce("bench", VALUE, key=shape.key(i), headers=shape.headers())
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush()
    probe = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "probe", "log_level": 3}
    )
    kept = 0
    for p in range(PARTITIONS):
        low, high = probe.get_watermark_offsets(
            confluent_kafka.TopicPartition("bench", p), timeout=10
        )
        kept += high - low
    probe.close()
    return producer, bootstrap, kept


def _confluent_read(bootstrap: str, records: int, batch: bool) -> Timing:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    timing = Timing()
    consumer.assign(
        [
            confluent_kafka.TopicPartition("bench", p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    size = 0
    deadline = time.monotonic() + 60
    while timing.count < records and time.monotonic() < deadline:
        if batch:
            messages = consumer.consume(BATCH_MESSAGES, 0)
            got = 0
            for message in messages:
                if message.error() is None:
                    size += len(message.value())
                    got += 1
            if got:
                timing.got(got)
        else:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            size += len(message.value())
            timing.got(1)
    consumer.close()
    if timing.count < records:
        raise RuntimeError(f"the mock cluster gave back {timing.count} of {records} records")
    return timing


def _seglog_fill(bootstrap: str, topic: str, shape: Shape, records: int) -> None:
    with Producer(
        bootstrap, linger_ms=5, batch_size=65536, compression_type=shape.compression
    ) as producer:
        for i in range(records):
            producer.send(
                topic, VALUE, key=shape.key(i), headers=shape.headers(), partition=i % PARTITIONS
            )
        producer.flush()


def _seglog_read(bootstrap: str, topic: str, records: int) -> Timing:
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        timing = Timing()
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        size = 0
        deadline = time.monotonic() + 60
        while timing.count < records and time.monotonic() < deadline:
            polled = consumer.poll_records(timeout_ms=1000)
            for record in polled:
                size += len(record.value)  # type: ignore[arg-type]
            if polled:
                timing.got(len(polled))
    if timing.count < records:
        raise RuntimeError(f"read back {timing.count} of {records} records")
    return timing


def _best(runs: dict[str, Callable[[], Timing]]) -> dict[str, tuple[float, float]]:
    """Per side: (best steady seconds per record, best seconds to the first record)."""
    timings: dict[str, list[Timing]] = {name: [] for name in runs}

    def timed(name: str) -> Callable[[], float]:
        def once() -> float:
            timing = runs[name]()
            timings[name].append(timing)
            return timing.steady_s

        return once

    best_in_turns({name: timed(name) for name in runs}, ROUNDS)
    return {
        name: (min(t.steady_s for t in ts), min(t.first_record_s for t in ts))
        for name, ts in timings.items()
    }


def run(report) -> None:  # type: ignore[no-untyped-def]
    with one_node_cluster(
        "seglog-bench-consumer-", [f"read-{i}" for i in range(len(SHAPES))], PARTITIONS
    ) as address:
        for i, shape in enumerate(SHAPES):
            mock, bootstrap, kept = _mock_fill(shape)
            topic = f"read-{i}"
            _seglog_fill(address, topic, shape, kept)
            best = _best(
                {
                    "poll": lambda b=bootstrap, k=kept: _confluent_read(b, k, batch=False),
                    "consume": lambda b=bootstrap, k=kept: _confluent_read(b, k, batch=True),
                    "seglog": lambda t=topic, k=kept: _seglog_read(address, t, k),
                }
            )
            del mock
            ours = 1 / best["seglog"][0] / 1e3
            targets = (1.0, 0.8) if i == 0 else (None, None)
            report(
                f"consumer steady, {shape.name}, vs poll() (k rec/s)",
                ours,
                1 / best["poll"][0] / 1e3,
                "k rec/s",
                targets[0],
            )
            report(
                f"consumer steady, {shape.name}, vs consume() (k rec/s)",
                ours,
                1 / best["consume"][0] / 1e3,
                "k rec/s",
                targets[1],
            )
            report(
                f"  time to first record, {shape.name} (1/s)",
                1 / best["seglog"][1],
                1 / min(best["poll"][1], best["consume"][1]),
                "1/s",
                1.0 if i == 0 else None,
            )
