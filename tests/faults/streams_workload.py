"""The streams campaign's client processes (tests/faults/streams_campaign.py), each recording its
history (tests/faults/history.py) for tests/faults/streams_checker.py:

    python -m tests.faults.streams_workload producer --bootstrap KAFKA --topic IN \
        --history-dir DIR --name producer-0 [--lines 2] [--interval-ms 100]
    python -m tests.faults.streams_workload consumer --bootstrap KAFKA --topic OUT \
        --partitions 3 --history-dir DIR --name consumer-0
    python -m tests.faults.streams_workload app --bootstrap KAFKA --input IN --output OUT \
        --app-id APP --classes DIR --state-dir DIR --threads 2 --name app-0-0
    python -m tests.faults.streams_workload final-read --bootstrap KAFKA --topic IN \
        --output OUT --partitions 3 --history-dir DIR [--max-seconds 180]

The producer (librdkafka, idempotent, acks=all) writes lines of words to the input topic, each
keyed by a unique line id `<name>-<n>`: `invoke` {"line", "text"} before the send, `ok` with
its partition and offset, `info` when its delivery failed (it may still have been written).
It also records, as `info` "epoch-bump" {"phase": "drain" | "bumped", "message"}, each time
librdkafka's idempotent producer drains its partitions to bump its producer epoch and each
time it has bumped it (its EOS debug log): a batch possibly written under the old epoch is
sent again under the new one, and the checker needs to know when that can have happened.
The consumer reads the output topic from its start at read_committed (assigned, no group) and
records each poll: `poll` ok {"records": [[partition, offset, word, count], ...]}. The app is
the Kafka Streams word count (tests/java/WordCountEos.java) itself: this process becomes the
JVM (exec), so a fault's SIGKILL is the application's. The final reader, once the producers
are stopped and while the apps still run, reads the whole input at read_committed
(`final-input` ok {"lines": [[partition, offset, id, text], ...]}), then the output at
read_committed until every word's last count is its count in the input and every partition is
read to its end (`final-output` ok {"records": [...], "complete": bool}); it exits 1 when the
output never caught up within
--max-seconds.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import struct
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.faults.history import HistoryWriter
from tests.faults.workload import StopFlag

# Few distinct words, so every word is counted many times in every partition's run.
VOCABULARY = tuple(f"w{i:02d}" for i in range(16))
WORDS_PER_LINE = 5
DELIVERY_TIMEOUT_MS = 60_000
POLL_S = 0.5


def describe(error: object) -> str:
    return str(error)[:300]


# -- the input's producer -----------------------------------------------------------------------


class EpochBumps(logging.Handler):
    """librdkafka's log (its EOS debug lines and its warnings) to stderr, and its producer
    epoch bumps into the history. librdkafka bumps the epoch of its idempotent producer for all
    partitions at once (rd_kafka_idemp_drain_epoch_bump: a message timed out in flight, an
    UNKNOWN_PRODUCER_ID, or OUT_OF_ORDER_SEQUENCE_NUMBER on a request behind a failed one) and
    then sends every message not acknowledged yet again from sequence 0, including one whose
    earlier send it took for not written (NOT_LEADER_OR_FOLLOWER after the append) though it
    was: no broker can recognise it, its producer epoch is new (librdkafka issue 4953)."""

    def __init__(self, history: HistoryWriter) -> None:
        super().__init__(logging.DEBUG)
        self.history = history

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        print(message, file=sys.stderr, flush=True)
        if "Beginning partition drain" in message and "epoch bump" in message:
            self.history.record("info", "epoch-bump", {"phase": "drain", "message": message})
        elif "bumped epoch to" in message:
            self.history.record("info", "epoch-bump", {"phase": "bumped", "message": message})


def run_producer(args: argparse.Namespace) -> int:
    stop = StopFlag()
    history = HistoryWriter(Path(args.history_dir), args.name)
    rng = random.Random(args.name)
    log = logging.getLogger(f"rdkafka.{args.name}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(EpochBumps(history))
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "enable.idempotence": True,
            "client.id": args.name,
            "linger.ms": 5,
            "message.timeout.ms": DELIVERY_TIMEOUT_MS,
            # The EOS and MSG debug lines are few (state changes, drains, bumps, a batch's
            # error and its retry), served by poll(); the producer's log keeps them.
            "debug": "eos,msg",
            "log_level": 7,
        },
        logger=log,
    )

    def delivered(error: KafkaError | None, message: Any) -> None:
        line = message.key().decode()
        if error is None:
            value = {"line": line, "partition": message.partition(), "offset": message.offset()}
            history.record("ok", "line", value)
        else:
            history.record("info", "line", {"line": line, "error": describe(error)})

    n = 0
    deadline = time.monotonic() + args.max_seconds
    try:
        while not stop and time.monotonic() < deadline:
            for _ in range(args.lines):
                line = f"{args.name}-{n}"
                text = " ".join(rng.choice(VOCABULARY) for _ in range(WORDS_PER_LINE))
                history.record("invoke", "line", {"line": line, "text": text})
                producer.produce(args.topic, text.encode(), line.encode(), on_delivery=delivered)
                n += 1
            producer.poll(0)
            stop.wait(args.interval_ms / 1000)
        # Stopped: every line sent is delivered or failed before the process ends.
        producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5)
    finally:
        history.close()
    return 0


# -- readers ------------------------------------------------------------------------------------


def reader(args: argparse.Namespace, topic: str, isolation: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"{args.name}-{topic}",  # never joined: partitions are assigned
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(args.partitions)])
    return consumer


def counts_of(messages: list[Any]) -> list[list[Any]]:
    """[[partition, offset, word, count], ...] of the output's records among `messages`."""
    out = []
    for m in messages:
        if m.error() is None:
            (count,) = struct.unpack(">q", m.value())
            out.append([m.partition(), m.offset(), m.key().decode(), count])
    return out


def run_consumer(args: argparse.Namespace) -> int:
    stop = StopFlag()
    history = HistoryWriter(Path(args.history_dir), args.name)
    consumer = reader(args, args.topic, "read_committed")
    deadline = time.monotonic() + args.max_seconds
    try:
        while not stop and time.monotonic() < deadline:
            records = counts_of(consumer.consume(num_messages=2000, timeout=POLL_S))
            if records:
                history.record("ok", "poll", {"records": records})
    finally:
        consumer.close()
        history.close()
    return 0


def read_input(args: argparse.Namespace) -> list[list[Any]] | None:
    """Every line of the input as written ([partition, offset, id, text]; a record the
    consumer hands over twice kept once), each partition read at read_committed, as the word
    count reads it, to the end it had when asked; None when that could not be done by the
    deadline."""
    consumer = reader(args, args.topic, "read_committed")
    lines: dict[tuple[int, int], list[Any]] = {}
    deadline = time.monotonic() + args.max_seconds
    try:
        ends = {}
        while len(ends) < args.partitions and time.monotonic() < deadline:
            for p in range(args.partitions):
                try:
                    _, ends[p] = consumer.get_watermark_offsets(
                        TopicPartition(args.topic, p), timeout=5, cached=False
                    )
                except Exception as exc:  # a partition's leader moving: asked again
                    print(f"final read: {args.topic}-{p}: {describe(exc)}", file=sys.stderr)
        done = {p for p, end in ends.items() if end == 0}
        while len(done) < args.partitions and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=2000, timeout=POLL_S):
                error = m.error()
                if error is None:
                    if m.offset() < ends[m.partition()]:
                        at = (m.partition(), m.offset())
                        lines[at] = [*at, m.key().decode(), m.value().decode()]
                    if m.offset() + 1 >= ends[m.partition()]:
                        done.add(m.partition())
                elif error.code() != KafkaError._PARTITION_EOF:
                    print(f"final read: {args.topic}: {error}", file=sys.stderr)
        return [lines[at] for at in sorted(lines)] if len(done) == args.partitions else None
    finally:
        consumer.close()


def run_final_read(args: argparse.Namespace) -> int:
    history = HistoryWriter(Path(args.history_dir), args.name)
    try:
        lines = read_input(args)
        if lines is None:
            history.record("info", "final-input", {"lines": []})
            return 1
        history.record("ok", "final-input", {"lines": lines})
        expected = Counter(word for *_, text in lines for word in text.split())
        complete, records = read_output(args, expected)
        history.record("ok", "final-output", {"records": records, "complete": complete})
        return 0 if complete else 1
    finally:
        history.close()


def read_output(args: argparse.Namespace, expected: Counter[str]) -> tuple[bool, list[list[Any]]]:
    """The output from its start at read_committed until every word's last count is
    `expected`'s and every partition is read to its end (its last stable offset: the apps'
    transactions over it ended); whether that happened by the deadline, and what was read."""
    consumer = reader(args, args.output, "read_committed")
    records: dict[tuple[int, int], list[Any]] = {}  # a record handed over twice kept once
    latest: dict[str, int] = {}
    at_end: set[int] = set()
    deadline = time.monotonic() + args.max_seconds
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(num_messages=2000, timeout=POLL_S):  # in their order
                error = m.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                    continue
                at_end.discard(m.partition())
                [record] = counts_of([m])
                if (m.partition(), m.offset()) not in records:
                    latest[record[2]] = record[3]
                    records[(m.partition(), m.offset())] = record
            if len(at_end) == args.partitions and latest == dict(expected):
                break
        return len(at_end) == args.partitions and latest == dict(expected), [
            records[at] for at in sorted(records)
        ]
    finally:
        consumer.close()


# -- the application ----------------------------------------------------------------------------


def run_app(args: argparse.Namespace) -> int:
    """Become the word count's JVM (this pid, so a SIGKILL is the application's)."""
    from devtools.apache_kafka import log4j2_config, streams_classpath

    Path(args.state_dir).mkdir(parents=True, exist_ok=True)
    command = [
        "java",
        "-Xmx384m",
        f"-Dlog4j2.configurationFile={log4j2_config()}",
        "-cp",
        f"{args.classes}{os.pathsep}{streams_classpath()}",
        "WordCountEos",
        args.bootstrap,
        args.app_id,
        args.input,
        args.output,
        args.state_dir,
        str(args.threads),
    ]
    sys.stdout.flush()
    os.execvp(command[0], command)
    return 1  # not reached: exec replaces this process


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.streams_workload")
    roles = parser.add_subparsers(dest="role", required=True)
    for role in ("producer", "consumer", "final-read", "app"):
        sub = roles.add_parser(role)
        sub.add_argument("--bootstrap", required=True)
        sub.add_argument("--name", default=role if role == "final-read" else None)
        sub.add_argument("--max-seconds", type=float, default=3600.0)
        if role != "app":
            sub.add_argument("--topic", required=True)
            sub.add_argument("--partitions", type=int, default=3)
            sub.add_argument("--history-dir", required=True)
    producer = roles.choices["producer"]
    producer.add_argument("--lines", type=int, default=2, help="lines a tick")
    producer.add_argument("--interval-ms", type=float, default=100.0)
    roles.choices["final-read"].add_argument("--output", required=True)
    app = roles.choices["app"]
    for name in ("--input", "--output", "--app-id", "--classes", "--state-dir"):
        app.add_argument(name, required=True)
    app.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.name is None:
        parser.error("--name is required")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runners = {
        "producer": run_producer,
        "consumer": run_consumer,
        "final-read": run_final_read,
        "app": run_app,
    }
    return runners[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
