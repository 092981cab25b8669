"""The transactional campaign's clients (a second implementation: librdkafka through
confluent-kafka, on the gateways' Kafka port), each a process of its own recording its
history (tests/faults/history.py) for tests/faults/txn_checker.py:

    python -m tests.faults.txn_workload producer --bootstrap KAFKA --topic T --partitions 3 \
        --history-dir DIR --name producer-0 [--abort-probability 0.25] [--interval-ms 20]
    python -m tests.faults.txn_workload consumer --bootstrap KAFKA --topic T --partitions 3 \
        --history-dir DIR --name consumer-0 --isolation read_committed|read_uncommitted
    python -m tests.faults.txn_workload final-read --bootstrap KAFKA --topic T --partitions 3 \
        --history-dir DIR [--stable-wait-s 60]

The producer runs transactions (transactional id: its name) of one to four writes over random
partitions, unique values `<name>-<n>-<i>`; some it aborts on purpose, after flushing its
writes so that they are in the log; it records each transaction's writes and intent, then
its outcome as it saw it: `ok` (committed), `fail` (certainly not committed: aborted, or
commit never asked) or `info` (commit asked, answer unknown). The consumer reads every
partition from offset 0 (assigned, no group) at its isolation level and every half second
asks the last stable offsets (ListOffsets READ_COMMITTED latest). The final reader, once the
producers are stopped, waits for each partition's last stable offset to reach its high
watermark (at most `--stable-wait-s`: transactions left open by killed producers time out),
records that, then reads every partition to its end at both isolation levels.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.faults.history import HistoryWriter
from tests.faults.workload import StopFlag

ISOLATIONS = ("read_committed", "read_uncommitted")
# Transactions left open by a killed producer are aborted by the coordinator after this.
TRANSACTION_TIMEOUT_MS = 10_000
REQUEST_TIMEOUT_MS = 3_000
# How long one transactional call (init, commit, abort) may take before it is given up.
CALL_TIMEOUT_S = 15.0
COMMIT_ATTEMPTS = 3
LSO_EVERY_S = 0.5
ERROR_BACKOFF_S = 0.2
DEBUG = os.environ.get("SEGLOG_TXN_WORKLOAD_RDKAFKA_DEBUG", "")  # e.g. "eos,protocol"


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:300]


def kafka_error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


# -- the transactional producer -------------------------------------------------------------


def discard(producer: Producer) -> None:
    """Drop what a producer still holds; a producer in a fatal state raises its fatal
    error from every call, which says nothing new here."""
    try:
        producer.purge()
        producer.flush(0)
    except KafkaException as exc:
        print(f"discarding a producer: {describe(exc)}", file=sys.stderr)


class TxnProducer:
    """A librdkafka transactional producer that is replaced (same transactional id: the new
    one fences the old and aborts its open transaction) when it cannot go on."""

    def __init__(self, args: argparse.Namespace, stop: StopFlag) -> None:
        self.args = args
        self.stop = stop
        self.producer: Producer | None = None

    def ready(self) -> Producer | None:
        """The producer, its transactions initialised (None once stopped)."""
        while self.producer is None and not self.stop:
            producer = Producer(
                {
                    "bootstrap.servers": self.args.bootstrap,
                    "transactional.id": self.args.name,
                    "client.id": self.args.name,
                    "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    "socket.timeout.ms": REQUEST_TIMEOUT_MS,
                    "request.timeout.ms": REQUEST_TIMEOUT_MS,
                    "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    "linger.ms": 5,
                    # librdkafka's own account of the transaction protocol, when asked for
                    **({"debug": DEBUG} if DEBUG else {}),
                }
            )
            try:
                producer.init_transactions(CALL_TIMEOUT_S)
            except KafkaException as exc:
                print(f"{self.args.name}: init_transactions: {describe(exc)}", file=sys.stderr)
                discard(producer)
                self.stop.wait(ERROR_BACKOFF_S)
                continue
            self.producer = producer
        return self.producer

    def replace(self) -> None:
        if self.producer is not None:
            discard(self.producer)
        self.producer = None

    def run_one(
        self,
        producer: Producer,
        history: HistoryWriter,
        name: str,
        writes: list[tuple[int, str]],
        intent: str,
    ) -> tuple[str, dict[str, Any]]:
        """Run one transaction; its outcome as the client saw it and what it knows (the
        moment it asks to commit recorded too: no read_committed reader sees it before)."""
        delivered: list[list[Any]] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                delivered.append([msg.partition(), msg.offset(), msg.value().decode()])

        commit_asked = False
        try:
            producer.begin_transaction()
            for partition, value in writes:
                producer.produce(
                    self.args.topic,
                    value=value.encode(),
                    partition=partition,
                    on_delivery=on_delivery,
                )
            # Flushed first either way: aborted writes are to be in the log, for readers to skip.
            producer.flush(CALL_TIMEOUT_S)
            if intent == "abort":
                producer.abort_transaction(CALL_TIMEOUT_S)
                return "fail", {"offsets": delivered, "outcome": "aborted"}
            commit_asked = True
            history.record("invoke", "commit", {"txn": name})
            return self._commit(producer, delivered)
        except KafkaException as exc:
            error = describe(exc)
            if not self._abort_after(producer, exc):
                self.replace()
        except BufferError as exc:  # the local queue full: nothing of it sent to commit
            error = describe(exc)
            self.replace()
        # Once commit was asked, a failure cannot say it did not commit (the EndTxn may have
        # landed, and an abort after it may be the client's own epoch bump): unknown.
        outcome = "info" if commit_asked else "fail"
        return outcome, {"offsets": delivered, "error": error}

    def _commit(self, producer: Producer, delivered: list[list[Any]]) -> tuple[str, dict[str, Any]]:
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                producer.commit_transaction(CALL_TIMEOUT_S)
                return "ok", {"offsets": delivered, "outcome": "committed"}
            except KafkaException as exc:
                err = kafka_error(exc)
                if err is None or not err.retriable() or attempt == COMMIT_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _abort_after(self, producer: Producer, exc: KafkaException) -> bool:
        """Abort the transaction a failure left open; False when the producer must go."""
        err = kafka_error(exc)
        if err is not None and err.fatal():
            return False
        try:
            producer.abort_transaction(CALL_TIMEOUT_S)
        except KafkaException as abort_exc:
            print(f"{self.args.name}: abort: {describe(abort_exc)}", file=sys.stderr)
            return False
        return True


def run_producer(args: argparse.Namespace) -> int:
    stop = StopFlag()
    history = HistoryWriter(Path(args.history_dir), args.name)
    rng = random.Random(args.name)
    txn_producer = TxnProducer(args, stop)
    deadline = time.monotonic() + args.max_seconds
    n = 0
    try:
        while not stop and n < args.max_txns and time.monotonic() < deadline:
            producer = txn_producer.ready()
            if producer is None:
                break
            name = f"{args.name}-t{n}"
            writes = [
                (rng.randrange(args.partitions), f"{args.name}-{n}-{i}")
                for i in range(rng.randint(1, 4))
            ]
            intent = "abort" if rng.random() < args.abort_probability else "commit"
            history.record(
                "invoke",
                "txn",
                {"txn": name, "writes": [list(w) for w in writes], "intent": intent},
            )
            outcome, known = txn_producer.run_one(producer, history, name, writes, intent)
            history.record(outcome, "txn", {"txn": name, **known})  # type: ignore[arg-type]
            n += 1
            stop.wait(args.interval_ms / 1000)
    finally:
        txn_producer.replace()
        history.close()
    return 0


# -- readers --------------------------------------------------------------------------------


def partitions_of(args: argparse.Namespace) -> list[TopicPartition]:
    return [TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in range(args.partitions)]


def reader(args: argparse.Namespace, isolation: str, eof: bool = False) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"{args.name}-{isolation}",  # never joined: partitions are assigned
            "client.id": args.name,
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "enable.partition.eof": eof,
            "fetch.wait.max.ms": 100,
        }
    )


def admin(args: argparse.Namespace) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": args.bootstrap, "socket.timeout.ms": REQUEST_TIMEOUT_MS}
    )


def list_latest(
    client: AdminClient, args: argparse.Namespace, isolation: IsolationLevel
) -> dict[int, int]:
    """Each partition's latest offset at `isolation` (the last stable offset, read_committed;
    the high watermark, read_uncommitted); partitions answering an error are left out."""
    asked = {TopicPartition(args.topic, p): OffsetSpec.latest() for p in range(args.partitions)}
    futures = client.list_offsets(
        asked, isolation_level=isolation, request_timeout=REQUEST_TIMEOUT_MS / 1000
    )
    offsets: dict[int, int] = {}
    for tp, future in futures.items():
        try:
            offsets[tp.partition] = int(future.result().offset)
        except KafkaException:
            continue
    return offsets


def run_consumer(args: argparse.Namespace) -> int:
    stop = StopFlag()
    history = HistoryWriter(Path(args.history_dir), args.name)
    consumer = reader(args, args.isolation)
    lso_client = admin(args)
    history.record("ok", "assign", {"isolation": args.isolation})
    consumer.assign(partitions_of(args))
    next_lso = time.monotonic()
    try:
        while not stop:
            messages = consumer.consume(num_messages=500, timeout=0.2)
            records = [
                [m.partition(), m.offset(), m.value().decode(errors="replace")]
                for m in messages
                if m.error() is None
            ]
            if records:
                history.record("ok", "poll", {"isolation": args.isolation, "records": records})
            errors = [str(m.error()) for m in messages if m.error() is not None]
            if errors:
                history.record("info", "poll", {"error": "; ".join(errors)[:300]})
            if time.monotonic() >= next_lso:
                next_lso = time.monotonic() + LSO_EVERY_S
                observe_lso(lso_client, args, history)
    finally:
        consumer.close()
        history.close()
    return 0


def observe_lso(client: AdminClient, args: argparse.Namespace, history: HistoryWriter) -> None:
    history.record("invoke", "lso", {})
    try:
        offsets = list_latest(client, args, IsolationLevel.READ_COMMITTED)
    except Exception as exc:  # a gateway moving; the observation is unknown
        history.record("info", "lso", {"error": describe(exc)})
        return
    history.record("ok", "lso", {"offsets": {str(p): o for p, o in offsets.items()}})


def run_final_read(args: argparse.Namespace) -> int:
    """Wait for every partition to be stable, record it, then read everything at both
    isolation levels; exit 1 when some partition could not be read to its end."""
    history = HistoryWriter(Path(args.history_dir), args.name)
    client = admin(args)
    try:
        ends = wait_stable(client, args, history)
        if ends is None:
            return 1
        complete = True
        for isolation, end_of in zip(ISOLATIONS, ends, strict=True):
            complete = read_to_end(args, isolation, end_of, history) and complete
        return 0 if complete else 1
    finally:
        history.close()


def wait_stable(
    client: AdminClient, args: argparse.Namespace, history: HistoryWriter
) -> tuple[dict[int, int], dict[int, int]] | None:
    """Each partition's (last stable offset, high watermark) once they are equal, or as
    they were at `--stable-wait-s` (recorded either way: the checker judges)."""
    started = time.monotonic()
    lso: dict[int, int] = {}
    hw: dict[int, int] = {}
    while True:
        try:
            lso = list_latest(client, args, IsolationLevel.READ_COMMITTED)
            hw = list_latest(client, args, IsolationLevel.READ_UNCOMMITTED)
        except Exception as exc:  # retried until the bound
            print(f"final read: list offsets: {describe(exc)}", file=sys.stderr)
        known = len(lso) == len(hw) == args.partitions
        if known and all(lso[p] >= hw[p] for p in hw):
            break
        if time.monotonic() - started > args.stable_wait_s:
            if not known:
                print(f"final read: offsets unknown: lso {lso}, hw {hw}", file=sys.stderr)
                return None
            break
        time.sleep(ERROR_BACKOFF_S)  # a bounded poll of the offsets while transactions end
    waited_ms = int((time.monotonic() - started) * 1000)
    for p in range(args.partitions):
        history.record(
            "ok", "stable", {"partition": p, "lso": lso[p], "hw": hw[p], "waited_ms": waited_ms}
        )
    return lso, hw


def read_to_end(
    args: argparse.Namespace, isolation: str, ends: dict[int, int], history: HistoryWriter
) -> bool:
    consumer = reader(args, isolation, eof=True)
    read: dict[int, dict[int, str]] = {p: {} for p in ends}
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + args.max_seconds
    try:
        consumer.assign(partitions_of(args))
        while len(done) < len(ends) and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.2):
                error = m.error()
                if error is None:
                    if m.offset() < ends[m.partition()]:
                        read[m.partition()][m.offset()] = m.value().decode(errors="replace")
                elif (
                    error.code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]
                ):
                    done.add(m.partition())
                elif error.code() != KafkaError._PARTITION_EOF:
                    print(f"final read: {isolation}: {error}", file=sys.stderr)
    finally:
        consumer.close()
    for p in sorted(ends):
        history.record(
            "ok" if p in done else "info",
            "final-read",
            {
                "partition": p,
                "isolation": isolation,
                "records": sorted([o, v] for o, v in read[p].items()),
                "end_offset": ends[p],
            },
        )
    return len(done) == len(ends)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.txn_workload")
    roles = parser.add_subparsers(dest="role", required=True)
    for role in ("producer", "consumer", "final-read"):
        sub = roles.add_parser(role)
        sub.add_argument("--bootstrap", required=True)
        sub.add_argument("--topic", required=True)
        sub.add_argument("--partitions", type=int, required=True)
        sub.add_argument("--history-dir", required=True)
        sub.add_argument("--name", default=role if role == "final-read" else None)
        sub.add_argument("--max-seconds", type=float, default=3600.0)
    producer = roles.choices["producer"]
    producer.add_argument("--abort-probability", type=float, default=0.25)
    producer.add_argument("--interval-ms", type=float, default=20.0)
    producer.add_argument("--max-txns", type=int, default=10_000_000)
    roles.choices["consumer"].add_argument("--isolation", choices=ISOLATIONS, default=ISOLATIONS[0])
    roles.choices["final-read"].add_argument("--stable-wait-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.name is None:
        parser.error("--name is required")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    runners = {"producer": run_producer, "consumer": run_consumer, "final-read": run_final_read}
    return runners[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
