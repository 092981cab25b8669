"""`seglog consume TOPIC` (or `--include REGEX`: every topic it matches): print records as
`partition offset timestamp key value`, tab separated with tabs and newlines in them escaped
(key `null` when absent), or through `--format` / `--json` / kafka-console-consumer's
`--property print.key=true`... (record_format.py), through the Consumer.

Without `--group`: the partitions are assigned directly and reading starts at the log end
(new records only, as Kafka's console consumer), `--from-beginning`, `--offset` (`earliest`,
`latest`, `N`, or `-N`: N records before each partition's end, as kcat's `-o -N`; of
`--partition` or of every partition), or `--timestamp MS` (the first record at or after it,
through the time index). With `--group`: the consumer joins the group, starts at its
committed offsets (or where `--from-beginning` says when it has none) and commits as it goes.
`--isolation-level read_committed` reads only committed transactions' records.
Stops after `--max-messages`, after `--timeout-ms` without a new record, with `-e` once every
partition is read up to the end it had when first read (kcat's `-e`), on Ctrl-C or SIGTERM
(a group member leaves its group first), or quietly when its reader goes away.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from ..client.admin import Admin
from ..client.consumer import Consumer
from ..client.structs import TopicPartition
from ..errors import InvalidRequestError
from ..records.record import Record
from .options import client_settings, parse_properties, plural
from .record_format import (
    KAFKA_FORMATTER_DEFAULTS,
    default_line,
    format_line,
    json_line,
    kafka_line,
)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    consume = sub.add_parser("consume", parents=[common], help="print records of a topic")
    consume.add_argument("topic", nargs="?", help="the topic (or give --include)")
    consume.add_argument(
        "--include", metavar="REGEX", help="every topic whose whole name matches, as Kafka's"
    )
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument(
        "--offset",
        type=_start_offset,
        help="earliest, latest, N, or -N (N before the end) for --partition or every partition",
    )
    start.add_argument("--timestamp", type=int, help="start at the first record >= this ms")
    consume.add_argument("--partition", type=int, help="read only this partition")
    consume.add_argument("--group", help="read as a member of this consumer group")
    consume.add_argument(
        "--isolation-level",
        choices=["read_committed", "read_uncommitted"],
        help="read_committed: only committed transactions' records (aborted ones skipped); "
        "read_uncommitted (the default): every record, as kafka-console-consumer",
    )
    consume.add_argument("--max-messages", type=int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=int, help="stop when no record arrived for this long")
    consume.add_argument(
        "-e",
        "--exit-at-end",
        action="store_true",
        help="stop once every partition is read to the end it had when first read (kcat's -e)",
    )
    consume.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a formatter property of kafka-console-consumer (print.key=true, print.timestamp, "
        "print.partition, print.offset, print.headers, print.value, key.separator, "
        "headers.separator, line.separator, null.literal) or any consumer setting, Kafka's "
        "name (repeatable), e.g. fetch.max.wait.ms=100",
    )
    consume.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a consumer setting, Kafka's name (repeatable), as kafka-console-consumer",
    )
    consume.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="FILE",
        help="consumer settings from a properties file (NAME=VALUE lines)",
    )
    output = consume.add_mutually_exclusive_group()
    output.add_argument("--format", help="kcat-style format string, e.g. '%%k=%%s\\n'")
    output.add_argument("--json", action="store_true", help="one JSON object per record")
    consume.add_argument(
        "--print-headers", action="store_true", help="a headers column in the default output"
    )
    consume.set_defaults(handler=consume_records)


EARLIEST, LATEST = "earliest", "latest"


def _start_offset(text: str) -> str | int:
    if text in (EARLIEST, LATEST):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected earliest, latest, an offset N, or -N (N before the end)"
        ) from None


def _split_properties(pairs: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """--property into (formatter properties, consumer settings); a formatter value is kept
    as given (a separator may be a space or a tab)."""
    formatter: dict[str, str] = {}
    rest = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if sep and name.strip() in KAFKA_FORMATTER_DEFAULTS:
            formatter[name.strip()] = value
        else:
            rest.append(pair)
    return formatter, parse_properties(rest)


def _topics(args: argparse.Namespace) -> list[str]:
    if (args.topic is None) == (args.include is None):
        raise InvalidRequestError("give a topic or --include REGEX (one of them)")
    if args.topic is not None:
        return [args.topic]
    try:
        pattern = re.compile(args.include)
    except re.error as exc:
        raise InvalidRequestError(f"--include {args.include!r}: {exc}") from None
    with Admin(args.bootstrap) as admin:
        matched = [t for t in admin.list_topics() if pattern.fullmatch(t)]
    if not matched:
        raise InvalidRequestError(f"--include {args.include!r} matches no topic")
    return matched


def _open(args: argparse.Namespace, consumer_settings: dict[str, str]) -> Consumer:
    config: dict[str, object] = {
        "auto_offset_reset": "earliest" if args.from_beginning else "latest",
        **consumer_settings,
    }
    if args.isolation_level is not None:
        config["isolation_level"] = args.isolation_level
    topics = _topics(args)
    if args.group is not None:
        if args.partition is not None or args.offset is not None or args.timestamp is not None:
            raise InvalidRequestError("--group reads the group's share: no --partition/--offset")
        consumer = Consumer(args.bootstrap, group_id=args.group, **config)
        try:
            # A gateway that cannot be reached, or a topic it does not have, is said now:
            # a member would otherwise wait for its group without a word.
            for topic in topics:
                consumer.partitions_for(topic)
            consumer.subscribe(topics)
        except BaseException:
            consumer.close()
            raise
        return consumer
    if args.partition is not None and len(topics) != 1:
        raise InvalidRequestError("--partition needs a single topic, not --include")
    consumer = Consumer(args.bootstrap, **config)
    try:
        tps = []
        for topic in topics:
            partitions = len(consumer.partitions_for(topic))
            chosen = list(range(partitions))
            if args.partition is not None:
                if not 0 <= args.partition < partitions:
                    raise InvalidRequestError(
                        f"--partition {args.partition}: {topic} has partitions 0..{partitions - 1}"
                    )
                chosen = [args.partition]
            tps += [TopicPartition(topic, p) for p in chosen]
        consumer.assign(tps)
        if args.offset is not None:
            _seek(consumer, tps, args.offset)
        elif args.timestamp is not None:
            found = consumer.offsets_for_times(dict.fromkeys(tps, args.timestamp))
            late = [tp for tp, hit in found.items() if hit is None]
            if late:
                consumer.seek_to_end(*late)  # nothing that late: wait at the end
            for tp, hit in found.items():
                if hit is not None:
                    consumer.seek(tp, hit.offset)
    except BaseException:
        consumer.close()
        raise
    return consumer


def _seek(consumer: Consumer, tps: list[TopicPartition], offset: str | int) -> None:
    if offset == EARLIEST:
        consumer.seek_to_beginning(*tps)
    elif offset == LATEST:
        consumer.seek_to_end(*tps)
    elif isinstance(offset, int) and offset >= 0:
        for tp in tps:
            consumer.seek(tp, offset)
    else:
        before_end = -int(offset)
        starts = consumer.beginning_offsets(tps)
        for tp, end in consumer.end_offsets(tps).items():
            consumer.seek(tp, max(starts[tp], end - before_end))


class _EndTracker:
    """For `-e`: each partition's end offset when it is first read (a group member's
    partitions arrive with its assignment), and whether every one is read up to it."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.ends: dict[TopicPartition, int] = {}

    def reached(self) -> bool:
        assigned = self.consumer.assignment()
        if not assigned:
            return False
        new = [tp for tp in assigned if tp not in self.ends]
        if new:
            self.ends.update(self.consumer.end_offsets(new))
        return all(self.consumer.position(tp) >= self.ends[tp] for tp in assigned)


def _interrupt_on_sigterm() -> Callable[[], None]:
    """SIGTERM (timeout, systemd, docker stop) ends the loop as Ctrl-C does, so a group
    member leaves its group at once instead of waiting out its session; returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _quiet_stdout() -> None:
    """The reader went away (`consume | head`): send the rest of our output nowhere, so
    neither this loop nor the interpreter's exit reports a broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _line(record: Record, args: argparse.Namespace, formatter: dict[str, str]) -> str:
    if formatter:
        return kafka_line(record, formatter)
    if args.format is not None:
        return format_line(record, args.format)
    if args.json:
        return json_line(record) + "\n"
    return default_line(record, print_headers=args.print_headers) + "\n"


def consume_records(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    printed = 0
    formatter, property_settings = _split_properties(args.property)
    consumer_settings = client_settings(args.consumer_config, args.consumer_property)
    consumer_settings.update(property_settings)
    if formatter and (args.format is not None or args.json):
        raise InvalidRequestError("print.* properties choose the output: not with --format/--json")
    consumer = _open(args, consumer_settings)
    ends = _EndTracker(consumer) if args.exit_at_end else None
    last_record = time.monotonic()
    restore_sigterm = _interrupt_on_sigterm()
    try:
        while args.max_messages is None or printed < args.max_messages:
            wanted = None if args.max_messages is None else args.max_messages - printed
            records = consumer.poll_records(timeout_ms=200, max_records=wanted)
            for record in records:
                out.write(_line(record, args, formatter))
            printed += len(records)
            out.flush()
            if records:
                last_record = time.monotonic()
            if ends is not None and ends.reached():
                break
            if not records and (
                args.timeout_ms is not None
                and (time.monotonic() - last_record) * 1000 >= args.timeout_ms
            ):
                break
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        _quiet_stdout()
    finally:
        restore_sigterm()
        consumer.close()
    print(f"Processed a total of {plural(printed, 'message')}", file=sys.stderr)
    return 0
