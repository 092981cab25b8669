"""What the `kafka-protocol` group measures with confluent-kafka (librdkafka), the same calls
against any Kafka bootstrap list: producer and consumer throughput, and publish and
end-to-end latency at a fixed rate."""

from __future__ import annotations

import statistics
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import confluent_kafka

# Throughput: librdkafka's defaults (acks=all, 1 MB batches) with a short linger, as an
# application that sends as fast as it can would run it.
THROUGHPUT_PRODUCER = {"linger.ms": 5, "acks": "all", "log_level": 3}
# Latency: a short linger and at most five requests in flight (the Java producer's defaults).
# A Kafka broker reads a connection's next request only once it answered the last, so with
# linger 0 and librdkafka's unbounded in-flight requests, every record becomes a request of its
# own queued behind the others' replication waits: a backlog no real client configures.
LATENCY_PRODUCER = {
    "linger.ms": 5,
    "max.in.flight.requests.per.connection": 5,
    "acks": "all",
    "log_level": 3,
}
STAMP = struct.Struct(">q")  # each latency record opens with its send time (perf_counter_ns)
WARMUP_S = 2.0  # samples of the first seconds (connections, metadata, JIT) are dropped


def produce_seconds(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    """Seconds to send `records` copies of `value` (spread over the topic's partitions) and
    have every one acknowledged."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **THROUGHPUT_PRODUCER})
    producer.produce(topic, value)  # metadata and connections warm before the clock starts
    if producer.flush(30) != 0:
        raise RuntimeError(f"the first record to {topic} on {bootstrap} was not acknowledged")
    failures: list[confluent_kafka.KafkaError] = []

    def delivered(error: confluent_kafka.KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error)

    produce = producer.produce
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)  # the local queue is full: let librdkafka drain it
    if producer.flush(120) != 0:
        raise RuntimeError(f"records to {topic} still unacknowledged after 120 s")
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{len(failures)} records failed, first: {failures[0]}")
    return elapsed


# How many records one consume() call may return. The last call asks only for what is left:
# consume() waits its whole timeout for a batch it cannot fill, and asking for 10,000 when one
# record remained added a flat second to both systems' runs (50,001 records read in 0.55 s
# were timed as 1.55 s, which made the figure ~32k rec/s on either side).
CONSUME_BATCH = 10_000
CONSUME_TIMEOUT_S = 1.0


def _fetch_queue(records: int) -> dict[str, int]:
    """The consumer's prefetch queue, as large as the run (the same on both systems).

    librdkafka stops fetching for fetch.queue.backoff.ms (1 s) once queued.min.messages
    (100,000, counted over the consumer's whole queue) wait for the application. Against a
    server that answers faster than this Python loop takes records, that paused the read for a
    second in the middle of the run (librdkafka's `debug=fetch` log: "Fetch backoff for 1000ms:
    Local: Queue full"): the client's pause was timed, not the server. 250,000 records of 100 B
    fit within queued.max.messages.kbytes' default 64 MiB."""
    return {"queued.min.messages": min(10_000_000, max(100_000, records))}


@dataclass(frozen=True)
class ConsumeTiming:
    """A consumer's read of a topic from its start: `records` received after its first
    batch in `seconds` (the steady rate, as bench/consumer.py times it), and the time from
    `assign` to that first batch (connections, offsets lookup, first fetch) apart."""

    records: int
    seconds: float
    first_record_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def consume_timing(bootstrap: str, topic: str, partitions: int, records: int) -> ConsumeTiming:
    """A consumer assigned every partition from the start, until it received `records`."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "log_level": 3,
            **_fetch_queue(records),
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        seen = 0
        assigned = time.perf_counter()
        deadline = assigned + 300
        first_at: float | None = None
        first_batch = 0
        while seen < records:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"consumed {seen} of {records} records of {topic} in 300 s")
            wanted = min(CONSUME_BATCH, records - seen)
            for message in consumer.consume(num_messages=wanted, timeout=CONSUME_TIMEOUT_S):
                if message.error() is None:
                    seen += 1
                elif message.error().code() != confluent_kafka.KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"consuming {topic}: {message.error()}")
            if first_at is None and seen:
                first_at, first_batch = time.perf_counter(), seen
        ended = time.perf_counter()
        assert first_at is not None
        if seen == first_batch:
            # Everything came in the first batch: no steady stretch to time.
            raise RuntimeError(f"all {seen} records of {topic} came in one batch: read more")
        return ConsumeTiming(seen - first_batch, ended - first_at, first_at - assigned)
    finally:
        consumer.close()


@dataclass
class Latencies:
    """Milliseconds per record after the warm-up: until acknowledged (publish) and until a
    consumer had it (end to end)."""

    publish_ms: list[float]
    end_to_end_ms: list[float]
    sent_per_s: float  # the rate the sender kept (below the asked rate when it fell behind)
    missing: int  # records after the warm-up not acknowledged or not consumed in time


def percentile(samples: Sequence[float], fraction: float) -> float:
    cuts = statistics.quantiles(samples, n=1000, method="inclusive")
    return cuts[min(len(cuts) - 1, max(0, round(fraction * 1000) - 1))]


def latencies_at_rate(
    bootstrap: str, topic: str, partitions: int, rate_per_s: int, duration_s: float, size: int
) -> Latencies:
    """Send `size`-byte records at `rate_per_s` for `duration_s` while a consumer (assigned
    every partition at its end) receives them in another thread."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-latency-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "log_level": 3,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_END)
            for p in range(partitions)
        ]
    )
    total = int(rate_per_s * duration_s)
    received: list[tuple[int, int]] = []  # (sent ns, received ns)
    stop = threading.Event()

    def receive() -> None:
        # One message a call: a batch call waits for its count or its timeout, which would
        # count as latency.
        while not stop.is_set():
            message = consumer.poll(0.1)
            now = time.perf_counter_ns()
            if message is not None and message.error() is None:
                received.append((STAMP.unpack_from(message.value())[0], now))

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **LATENCY_PRODUCER})
    # The consumer's positions and the producer's connections settle before timing starts.
    producer.produce(topic, STAMP.pack(time.perf_counter_ns()) + b"w" * size)
    producer.flush(30)
    published: list[tuple[int, int]] = []
    padding = b"p" * max(0, size - STAMP.size)

    def delivered(error: confluent_kafka.KafkaError | None, message: confluent_kafka.Message):  # type: ignore[no-untyped-def]
        if error is None:
            published.append((STAMP.unpack_from(message.value())[0], time.perf_counter_ns()))

    interval_ns = 1_000_000_000 // rate_per_s
    start = time.perf_counter_ns()
    for i in range(total):
        due = start + i * interval_ns
        while (now := time.perf_counter_ns()) < due:
            producer.poll((due - now) / 1e9)  # serves acknowledgements while it waits
        producer.produce(topic, STAMP.pack(time.perf_counter_ns()) + padding, on_delivery=delivered)
        producer.poll(0)
    sent_per_s = total / max(1e-9, (time.perf_counter_ns() - start) / 1e9)
    producer.flush(60)
    deadline = time.monotonic() + 30
    while len([r for r in received if r[0] >= start]) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    receiver.join()
    consumer.close()
    warm = start + int(WARMUP_S * 1e9)
    ends = [(got - sent) / 1e6 for sent, got in received if sent >= warm]
    acks = [(acked - sent) / 1e6 for sent, acked in published if sent >= warm]
    expected = total - int(WARMUP_S * rate_per_s)
    if len(ends) < 2 or len(acks) < 2:  # no percentile to take
        raise RuntimeError(
            f"at {rate_per_s}/s on {bootstrap}: {len(acks)} acknowledged and {len(ends)} "
            f"consumed of {expected} records"
        )
    return Latencies(acks, ends, sent_per_s, max(0, expected - min(len(acks), len(ends))))
