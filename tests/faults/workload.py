"""The campaign's clients, each run as a process of its own that records what it did in its
history file (tests/faults/history.py), so that a fault in the client (or the driver) cannot
hide what the cluster answered:

    python -m tests.faults.workload producer --bootstrap ADDR --topic T --history-dir DIR \
        --name producer-0 [--mode idempotent|plain|acks1] [--interval-ms 2] [--max-sends N]
    python -m tests.faults.workload consumer --bootstrap ADDR --topic T --history-dir DIR \
        --name consumer-0 --group G [--commit-every 10]
    python -m tests.faults.workload final-read --bootstrap ADDR --topic T --history-dir DIR

The producer sends unique values `<name>-<n>` under a small set of keys, paced as an
application would (a sleep between sends), until SIGTERM, `--max-sends` or `--max-seconds`.
The consumer reads as a member of a group, committing explicitly. The final reader reads
every partition from offset 0 to its end and exits 0 only when it read all of it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seglog.client.consumer import Consumer
from seglog.client.futures import RecordMetadata
from seglog.client.gateway import LATEST, GatewayClient
from seglog.client.producer import Producer
from seglog.client.structs import OffsetAndMetadata, TopicPartition
from seglog.errors import RequestTimedOutError, SeglogError
from tests.faults.history import EventType, HistoryWriter

PRODUCER_MODES: dict[str, dict[str, Any]] = {
    "idempotent": {"acks": "all"},  # enable_idempotence defaults on with acks=all
    "plain": {"acks": "all", "enable_idempotence": False},
    "acks1": {"acks": 1, "enable_idempotence": False},
}
CLOSE_TIMEOUT_S = 30.0
ERROR_BACKOFF_S = 0.1


class StopFlag:
    """Set by SIGTERM (or SIGINT): the client finishes the operation it is in and exits."""

    def __init__(self) -> None:
        self.event = threading.Event()
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, signum: int, frame: object) -> None:
        self.event.set()

    def wait(self, timeout_s: float) -> bool:
        return self.event.wait(timeout_s)

    def __bool__(self) -> bool:
        return self.event.is_set()


def outcome_of(error: BaseException) -> EventType:
    """`info` when the send may have happened (timed out, or a retriable error the producer
    gave up on), `fail` when the cluster refused it."""
    if isinstance(error, RequestTimedOutError):
        return "info"
    if isinstance(error, SeglogError):
        return "info" if error.retriable else "fail"
    return "info"


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:300]


def run_producer(args: argparse.Namespace) -> int:
    stop = StopFlag()
    history = HistoryWriter(Path(args.history_dir), args.name)
    producer = Producer(
        args.bootstrap,
        linger_ms=args.linger_ms,
        request_timeout_ms=args.request_timeout_ms,
        delivery_timeout_ms=args.delivery_timeout_ms,
        client_id=args.name,
        produce_transport=args.produce_transport,
        **PRODUCER_MODES[args.mode],
    )
    deadline = time.monotonic() + args.max_seconds
    sent = 0
    try:
        while not stop and sent < args.max_sends and time.monotonic() < deadline:
            value = f"{args.name}-{sent}"
            key = f"k{sent % args.keys}"
            invoked = {"value": value, "key": key}
            history.record("invoke", "send", invoked)
            try:
                producer.send(
                    args.topic,
                    value.encode(),
                    key=key.encode(),
                    callback=_completion(history, invoked),
                )
            except Exception as exc:  # never queued: certainly not written
                history.record("fail", "send", {**invoked, "error": describe(exc)})
                stop.wait(ERROR_BACKOFF_S)
            sent += 1
            stop.wait(args.interval_ms / 1000)
    finally:
        # Sends still unanswered when the producer closes stay invoke-only: unknown.
        producer.close(timeout=CLOSE_TIMEOUT_S)
        history.close()
        direct = producer.metrics()["producer-metrics"]["direct-requests"]
        print(
            f"{args.name}: produce_transport {args.produce_transport}, {direct:.0f} requests "
            f"answered by their leaders straight",
            file=sys.stderr,
        )
    return 0


def _completion(history: HistoryWriter, invoked: dict[str, str]) -> Any:
    def complete(metadata: RecordMetadata | None, error: BaseException | None) -> None:
        if error is not None:
            history.record(outcome_of(error), "send", {**invoked, "error": describe(error)})
        elif metadata is not None:
            history.record(
                "ok",
                "send",
                {**invoked, "partition": metadata.partition, "offset": metadata.offset},
            )

    return complete


def run_consumer(args: argparse.Namespace) -> int:
    stop = StopFlag()
    history = HistoryWriter(Path(args.history_dir), args.name)
    consumer = Consumer(
        args.bootstrap,
        group_id=args.group,
        client_id=args.name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(1, args.session_timeout_ms // 5),
        request_timeout_ms=args.request_timeout_ms,
    )
    # A (re)started consumer begins from the group's committed offsets: a new assignment.
    history.record("ok", "assign", {"partitions": [], "generation": -1})
    assignment: tuple[int, str, tuple[int, ...]] = (-1, "", ())
    polls_since_commit = 0
    try:
        consumer.subscribe([args.topic])
        while not stop:
            try:
                records = consumer.poll_records(timeout_ms=200)
            except Exception as exc:  # a leader or coordinator moving
                history.record("info", "poll", {"error": describe(exc)})
                stop.wait(ERROR_BACKOFF_S)
                continue
            current = assignment_of(consumer)
            if current != assignment:
                assignment = current
                history.record(
                    "ok",
                    "assign",
                    {
                        "partitions": list(current[2]),
                        "generation": current[0],
                        "member": current[1],
                    },
                )
            if not records:
                continue
            history.record(
                "ok",
                "poll",
                {"records": [[r.partition, r.offset, _text(r.value)] for r in records]},
            )
            polls_since_commit += 1
            if polls_since_commit >= args.commit_every:
                polls_since_commit = 0
                commit(consumer, history, args.group)
        commit(consumer, history, args.group)
    finally:
        consumer.close(autocommit=False)
        history.close()
    return 0


def assignment_of(consumer: Consumer) -> tuple[int, str, tuple[int, ...]]:
    """Generation, member id and partitions: a consumer that joined again starts from the
    committed offsets, even when the coordinator handed out the same generation number (a
    restarted coordinator counts generations from 1 again), so the member id is part of it."""
    membership = getattr(consumer, "_group", None)
    member = str(getattr(membership, "member_id", ""))
    partitions = tuple(sorted(tp.partition for tp in consumer.assignment()))
    return consumer.generation, member, partitions


def commit(consumer: Consumer, history: HistoryWriter, group: str) -> None:
    """Commit the current positions explicitly, recording what was asked and the answer."""
    try:
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
    except Exception:  # assignment changing under us; the next commit covers it
        return
    if not positions:
        return
    invoked = {"group": group, "offsets": {str(tp.partition): o for tp, o in positions.items()}}
    history.record("invoke", "commit", invoked)
    try:
        consumer.commit({tp: OffsetAndMetadata(o) for tp, o in positions.items()})
    except Exception as exc:  # recorded; a group moving refuses commits
        history.record(outcome_of(exc), "commit", {**invoked, "error": describe(exc)})
    else:
        history.record("ok", "commit", invoked)


def run_final_read(args: argparse.Namespace) -> int:
    """Read every partition from 0 to its end (its high watermark once the cluster healed)
    and record each partition's records as one final read; exit 1 when some partition could
    not be read to its end within `--max-seconds` (recorded as `info`, which the checker
    does not take as final)."""
    history = HistoryWriter(Path(args.history_dir), args.name)
    client = GatewayClient(args.bootstrap, timeout_s=args.request_timeout_ms / 1000)
    consumer = Consumer(args.bootstrap, auto_offset_reset="earliest", client_id=args.name)
    deadline = time.monotonic() + args.max_seconds
    complete = True
    try:
        partitions = consumer.partitions_for(args.topic)
        ends = _log_ends(client, args.topic, partitions, deadline)
        if len(ends) < len(partitions):
            complete = False  # some partition's end is unknown: nothing is final
            partitions = sorted(ends)
        read: dict[int, dict[int, str]] = {p: {} for p in partitions}
        positions = {p: 0 for p in partitions}
        consumer.assign([TopicPartition(args.topic, p) for p in partitions])
        for p in partitions:
            consumer.seek(TopicPartition(args.topic, p), 0)
        while time.monotonic() < deadline and any(positions[p] < ends[p] for p in partitions):
            try:
                records = consumer.poll_records(timeout_ms=200)
            except Exception as exc:  # retried until the deadline
                print(f"final read: poll failed: {describe(exc)}", file=sys.stderr)
                continue
            for r in records:
                if r.offset < ends[r.partition]:
                    read[r.partition][r.offset] = _text(r.value)
                positions[r.partition] = max(positions[r.partition], r.offset + 1)
        for p in partitions:
            whole = positions[p] >= ends[p]
            complete = complete and whole
            history.record(
                "ok" if whole else "info",
                "final-read",
                {
                    "partition": p,
                    "records": sorted([o, v] for o, v in read[p].items()),
                    "end_offset": ends[p],
                },
            )
    finally:
        consumer.close(autocommit=False)
        client.close()
        history.close()
    return 0 if complete else 1


def _log_ends(
    client: GatewayClient, topic: str, partitions: list[int], deadline: float
) -> dict[int, int]:
    """Each partition's end (high watermark), from an answer without an error: a leader
    still moving (an error, offset -1) is asked again until the deadline, never taken for an
    empty log."""
    ends: dict[int, int] = {}
    while len(ends) < len(partitions) and time.monotonic() < deadline:
        missing = [p for p in partitions if p not in ends]
        try:
            answers = client.list_offsets(topic, dict.fromkeys(missing, LATEST))
        except Exception as exc:  # retried until the deadline
            print(f"final read: list offsets failed: {describe(exc)}", file=sys.stderr)
            answers = {}
        for p, result in answers.items():
            if result.error == 0 and result.offset >= 0:
                ends[p] = result.offset
            else:
                print(
                    f"final read: partition {p}: {result.error_message or result.error}",
                    file=sys.stderr,
                )
        if len(ends) < len(partitions):
            time.sleep(0.2)  # a bounded retry pause while leaders settle
    return ends


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode(errors="replace")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.workload")
    roles = parser.add_subparsers(dest="role", required=True)
    for role in ("producer", "consumer", "final-read"):
        sub = roles.add_parser(role)
        sub.add_argument("--bootstrap", required=True)
        sub.add_argument("--topic", required=True)
        sub.add_argument("--history-dir", required=True)
        sub.add_argument("--name", default=role if role == "final-read" else None)
        sub.add_argument("--request-timeout-ms", type=int, default=5000)
        sub.add_argument("--max-seconds", type=float, default=3600.0)
    producer = roles.choices["producer"]
    producer.add_argument("--mode", choices=sorted(PRODUCER_MODES), default="idempotent")
    producer.add_argument("--keys", type=int, default=5)
    producer.add_argument("--interval-ms", type=float, default=2.0)
    producer.add_argument("--max-sends", type=int, default=10_000_000)
    producer.add_argument("--linger-ms", type=int, default=5)
    producer.add_argument("--produce-transport", choices=("auto", "grpc"), default="auto")
    producer.add_argument("--delivery-timeout-ms", type=int, default=60_000)
    consumer = roles.choices["consumer"]
    consumer.add_argument("--group", required=True)
    consumer.add_argument("--commit-every", type=int, default=10)
    consumer.add_argument("--session-timeout-ms", type=int, default=6000)
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
