"""What the `transactions` group times with confluent-kafka (librdkafka), the same calls against
any Kafka bootstrap list: a transactional producer committing transactions of a fixed number of
records, and an idempotent producer (no transactions) sending the same records the same way.

Both send every record to partition `i % partitions`, so each transaction touches every
partition of the topic (an AddPartitionsToTxn for each, and a commit marker on each) and the
idempotent producer's batches are of the same shape. Both warm up first, off the clock: the
first record's metadata and connections, and for the transactional one `init_transactions()`
(the coordinator lookup and InitProducerId) and one whole transaction.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import confluent_kafka

# The same for both producers: acks=all (what idempotence and transactions require) and a
# short linger, as kafka_clients.THROUGHPUT_PRODUCER runs librdkafka for throughput.
PRODUCER = {"linger.ms": 5, "acks": "all", "log_level": 3}
TIMEOUT_S = 120.0
_IDS = itertools.count()  # transactional ids of producers started at once stay distinct


class _Deliveries:
    """Delivery reports' failures: a run with any is not a figure."""

    def __init__(self) -> None:
        self.failures: list[confluent_kafka.KafkaError] = []

    def __call__(self, error: confluent_kafka.KafkaError | None, _message: object) -> None:
        if error is not None:
            self.failures.append(error)

    def check(self, what: str) -> None:
        if self.failures:
            raise RuntimeError(f"{what}: {len(self.failures)} records failed: {self.failures[0]}")


def _produce(
    producer: confluent_kafka.Producer,
    topic: str,
    value: bytes,
    count: int,
    partitions: int,
    delivered: _Deliveries,
) -> None:
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)  # the local queue is full: let librdkafka drain it


def transactional_seconds(
    bootstrap: str,
    topic: str,
    partitions: int,
    transactions: int,
    per_transaction: int,
    value: bytes,
    warmed: Callable[[], object] = lambda: None,
) -> float:
    """Seconds to run `transactions` transactions of `per_transaction` copies of `value`, each
    begun, produced and committed (commit_transaction flushes and waits for the markers'
    EndTxn answer), one after another as a transactional application does. `warmed` is
    called between the warm-up and the timed part."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{topic}-{time.monotonic_ns()}-{next(_IDS)}",
            **PRODUCER,
        }
    )
    delivered = _Deliveries()
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()  # one transaction off the clock: connections to every leader
    _produce(producer, topic, value, per_transaction, partitions, delivered)
    producer.commit_transaction(TIMEOUT_S)
    warmed()
    start = time.perf_counter()
    for _ in range(transactions):
        producer.begin_transaction()
        _produce(producer, topic, value, per_transaction, partitions, delivered)
        producer.commit_transaction(TIMEOUT_S)
    elapsed = time.perf_counter() - start
    delivered.check(f"transactions to {topic} on {bootstrap}")
    return elapsed


def idempotent_seconds(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    value: bytes,
    warmed: Callable[[], object] = lambda: None,
) -> float:
    """Seconds for an idempotent producer (enable.idempotence, no transactional id) to send
    `records` copies of `value` and have every one acknowledged (`warmed`: as above)."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER}
    )
    delivered = _Deliveries()
    _produce(producer, topic, value, partitions, partitions, delivered)  # warm: every leader
    if producer.flush(TIMEOUT_S) != 0:
        raise RuntimeError(f"the first records to {topic} on {bootstrap} were not acknowledged")
    warmed()
    start = time.perf_counter()
    _produce(producer, topic, value, records, partitions, delivered)
    if producer.flush(TIMEOUT_S) != 0:
        raise RuntimeError(f"records to {topic} still unacknowledged after {TIMEOUT_S:.0f} s")
    elapsed = time.perf_counter() - start
    delivered.check(f"idempotent records to {topic} on {bootstrap}")
    return elapsed


def together_seconds(count: int, run: Callable[[Callable[[], object]], float]) -> float:
    """Seconds from the moment `count` producers, each `run(warmed)` on a thread of its own,
    have all warmed up until the last one is done (librdkafka sends from its own threads)."""
    barrier = threading.Barrier(count + 1, timeout=TIMEOUT_S)

    def one() -> float:
        try:
            return run(barrier.wait)
        except BaseException:
            barrier.abort()  # the others and the timer stop waiting for this one
            raise

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(one) for _ in range(count)]
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            for future in futures:
                future.result()  # what broke it, raised here
            raise
        start = time.perf_counter()
        for future in futures:
            future.result()
        return time.perf_counter() - start


def committed_records(
    bootstrap: str, topics: Sequence[str], partitions: int, timeout_s: float
) -> dict[str, int]:
    """Records a read_committed consumer reads of each topic, from every partition's start to
    its end (the last stable offset), within `timeout_s`: what the runs left committed. One
    consumer for every topic: each of its fetches asks for all of them at once."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-check-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for topic in topics
                for p in range(partitions)
            ]
        )
        seen = dict.fromkeys(topics, 0)
        at_end: set[tuple[str, int]] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(topics) * partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{seen} records, {len(at_end)} partitions read to their end")
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                error = message.error()
                if error is None:
                    seen[message.topic()] += 1
                elif error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add((message.topic(), message.partition()))
                else:
                    raise RuntimeError(f"reading {message.topic()}: {error}")
        return seen
    finally:
        consumer.close()
