"""librdkafka (confluent-kafka) as the tests drive it against a Kafka listener: reading
partitions by assignment, writing records round robin with each one's reported offset,
whether an authentication was refused, and kcat (librdkafka's command line tool)."""

from __future__ import annotations

import shutil
import subprocess
import time

import confluent_kafka

TIMEOUT_S = 20
KCAT = shutil.which("kcat")


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None, timeout_s: float = 30) -> bytes:
    """kcat's output for `args` against `bootstrap`; it must exit 0."""
    assert KCAT is not None, "kcat is not installed (make kafka installs it as root)"
    done = subprocess.run(
        [KCAT, "-b", bootstrap, *args],
        input=stdin,
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    return done.stdout


def authentication_refused(config: dict, topic: str) -> bool:
    """Whether librdkafka reports its authentication refused (its error callback) while it
    tries to write to `topic` with `config`."""
    errors: list = []
    producer = confluent_kafka.Producer({**config, "error_cb": errors.append})
    producer.produce(topic, value=b"never")
    deadline = time.monotonic() + TIMEOUT_S
    refused = False
    while not refused and time.monotonic() < deadline:
        producer.poll(0.1)
        refused = any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors)
    producer.purge()
    producer.flush(1)
    return refused


def rdkafka_consume(
    bootstrap: str, topic: str, partitions, count: int, offset: int = 0, config=None
):
    """`count` messages read by librdkafka from `offset` of each partition (assign, no
    group), `config` added to the consumer's."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            **(config or {}),
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, offset) for p in partitions])
    messages = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(messages) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            messages.append(message)
    finally:
        consumer.close()
    return messages


def produce_round_robin(producer, topic: str, partitions: int, count: int) -> dict:
    """Records b"0" .. b"<count-1>", record i to partition i % `partitions`; each value's
    (partition, offset) as its delivery report gave it (every report a success)."""
    reported = {}

    def report(error, message):
        assert error is None, error
        reported[message.value()] = (message.partition(), message.offset())

    for i in range(count):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions, on_delivery=report)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert len(reported) == count
    return reported


def assert_read_back_in_order(messages, reported: dict, partitions: int, count: int) -> None:
    """`messages` are the records `produce_round_robin` reported, each where its report said,
    each partition's in send order."""
    assert {m.value(): (m.partition(), m.offset()) for m in messages} == reported
    for partition in range(partitions):
        sent = [int(m.value()) for m in messages if m.partition() == partition]
        assert sent == sorted(sent) == list(range(partition, count, partitions))
