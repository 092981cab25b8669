"""Client benchmarks: seglog's Producer and Consumer end to end through a gateway and a
storage node (separate processes), beside confluent-kafka (librdkafka) against its in-process
mock cluster (`test.mock.num.brokers`) doing the same work, in the same run.

- produce: 100-byte records, acks=1, linger 5 ms, 16 KiB batches, one `send()` per record
  (and, without a baseline of its own, `send_many`), no compression, then lz4 and zstd; each
  side's best of 3 runs, the sides taking turns. Also keyed records (1000 keys in turn).
  Each send() figure's target: at least librdkafka's.
The consumer's figures are bench/consumer.py's (steady state, both of confluent's loops).

SEGLOG_BENCH_PRODUCE_RECORDS sets the produce count (default 1 000 000).
"""

from __future__ import annotations

import os
import time

import confluent_kafka

from seglog.client.producer import Producer

from .cluster import one_node_cluster
from .timing import best_in_turns

PRODUCE_RECORDS = int(os.environ.get("SEGLOG_BENCH_PRODUCE_RECORDS", 1_000_000))
PARTITIONS = 4  # what the mock cluster auto-creates
VALUE = b"v" * 100
PRODUCER_SETTINGS = {"acks": 1, "linger_ms": 5, "batch_size": 16384}
ROUNDS = 3  # producer runs per side and codec, in turns; each side's best counts
KEYS = [b"customer-%d" % i for i in range(1000)]  # keyed records: ids that repeat
SEND_TARGET = 1.0  # send() at least librdkafka's produce() (issue 32), keyed records too


def _confluent_produce(
    records: int, compression: str, keys: list[bytes] | None = None
) -> tuple[float, confluent_kafka.Producer]:
    producer = confluent_kafka.Producer(
        {
            "test.mock.num.brokers": 1,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 16384,
            "compression.type": compression,
            "log_level": 3,
        }
    )
    producer.list_topics(timeout=10)
    produce = producer.produce
    start = time.perf_counter()
    for i in range(records):
        key = keys[i % len(keys)] if keys else None
        while True:
            try:
                produce("bench", VALUE, key=key)
                break
            except BufferError:
                producer.poll(0.001)  # the local queue is full: let librdkafka drain it
    producer.flush()
    return time.perf_counter() - start, producer


def _seglog_produce(
    bootstrap: str, topic: str, records: int, compression: str, keys: list[bytes] | None = None
) -> float:
    with Producer(bootstrap, compression_type=compression, **PRODUCER_SETTINGS) as producer:
        producer.send(topic, VALUE).get(timeout=30)  # metadata and connection warm
        send = producer.send
        start = time.perf_counter()
        if keys:
            for i in range(records):
                send(topic, VALUE, key=keys[i % len(keys)])
        else:
            for _ in range(records):
                send(topic, VALUE)
        producer.flush()
        return time.perf_counter() - start


def _seglog_produce_many(bootstrap: str, topic: str, records: int) -> float:
    values = [VALUE] * 10_000
    with Producer(bootstrap, **PRODUCER_SETTINGS) as producer:
        producer.send(topic, VALUE).get(timeout=30)
        start = time.perf_counter()
        for _ in range(records // len(values)):
            producer.send_many(topic, values)
        producer.flush()
        return time.perf_counter() - start


def run(report) -> None:  # type: ignore[no-untyped-def]
    with one_node_cluster(
        "seglog-bench-clients-",
        ("produce-none", "produce-lz4", "produce-zstd", "keyed", "many"),
        PARTITIONS,
    ) as address:
        mock_elapsed = {}
        for codec in ("none", "lz4", "zstd"):
            best = best_in_turns(
                {
                    "mock": lambda c=codec: _confluent_produce(PRODUCE_RECORDS, c)[0],
                    "seglog": lambda c=codec: _seglog_produce(
                        address, f"produce-{c}", PRODUCE_RECORDS, c
                    ),
                },
                ROUNDS,
            )
            mock_elapsed[codec] = best["mock"]
            report(
                f"producer send(), 100 B, {codec} (k rec/s)",
                PRODUCE_RECORDS / best["seglog"] / 1e3,
                PRODUCE_RECORDS / best["mock"] / 1e3,
                "k rec/s",
                SEND_TARGET,
            )
        best = best_in_turns(
            {
                "mock": lambda: _confluent_produce(PRODUCE_RECORDS, "none", KEYS)[0],
                "seglog": lambda: _seglog_produce(address, "keyed", PRODUCE_RECORDS, "none", KEYS),
            },
            ROUNDS,
        )
        report(
            f"producer send(), 100 B, {len(KEYS)} keys, none (k rec/s)",
            PRODUCE_RECORDS / best["seglog"] / 1e3,
            PRODUCE_RECORDS / best["mock"] / 1e3,
            "k rec/s",
            SEND_TARGET,
        )
        elapsed = _seglog_produce_many(address, "many", PRODUCE_RECORDS)
        report(
            "producer send_many(), 100 B, none (k rec/s)",
            PRODUCE_RECORDS / elapsed / 1e3,
            PRODUCE_RECORDS / mock_elapsed["none"] / 1e3,
            "k rec/s",
            None,
        )
