"""`seglog consume TOPIC`: print records as `partition offset timestamp key value`, tab
separated with tabs and newlines in them escaped (key `null` when absent), or through
`--format` / `--json` (record_format.py), through the Consumer.

Without `--group`: the partitions are assigned directly and reading starts at the log end
(new records only, as Kafka's console consumer), `--from-beginning`, `--offset N` (with
`--partition`), or `--timestamp MS` (the first record at or after it, through the time index).
With `--group`: the consumer joins the group, starts at its committed offsets (or where
`--from-beginning` says when it has none) and commits as it goes.
Stops after `--max-messages`, after `--timeout-ms` without a new record, on Ctrl-C or
SIGTERM (a group member leaves its group first), or quietly when its reader goes away.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from ..client.consumer import Consumer
from ..client.structs import TopicPartition
from ..errors import InvalidRequestError
from .options import parse_properties, plural
from .record_format import default_line, format_line, json_line


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    consume = sub.add_parser("consume", parents=[common], help="print records of a topic")
    consume.add_argument("topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=int, help="start offset (needs --partition)")
    start.add_argument("--timestamp", type=int, help="start at the first record >= this ms")
    consume.add_argument("--partition", type=int, help="read only this partition")
    consume.add_argument("--group", help="read as a member of this consumer group")
    consume.add_argument("--max-messages", type=int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=int, help="stop when no record arrived for this long")
    consume.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any consumer setting, Kafka's name (repeatable), e.g. fetch.max.wait.ms=100",
    )
    output = consume.add_mutually_exclusive_group()
    output.add_argument("--format", help="kcat-style format string, e.g. '%%k=%%s\\n'")
    output.add_argument("--json", action="store_true", help="one JSON object per record")
    consume.add_argument(
        "--print-headers", action="store_true", help="a headers column in the default output"
    )
    consume.set_defaults(handler=consume_records)


def _open(args: argparse.Namespace) -> Consumer:
    config: dict[str, object] = {
        "auto_offset_reset": "earliest" if args.from_beginning else "latest",
        **parse_properties(args.property),
    }
    if args.group is not None:
        if args.partition is not None or args.offset is not None or args.timestamp is not None:
            raise InvalidRequestError("--group reads the group's share: no --partition/--offset")
        consumer = Consumer(args.bootstrap, group_id=args.group, **config)
        consumer.subscribe([args.topic])
        return consumer
    consumer = Consumer(args.bootstrap, **config)
    try:
        partitions = len(consumer.partitions_for(args.topic))
        chosen = list(range(partitions))
        if args.partition is not None:
            if not 0 <= args.partition < partitions:
                raise InvalidRequestError(
                    f"--partition {args.partition}: {args.topic} has partitions 0..{partitions - 1}"
                )
            chosen = [args.partition]
        if args.offset is not None and args.partition is None:
            raise InvalidRequestError("--offset needs --partition")
        tps = [TopicPartition(args.topic, p) for p in chosen]
        consumer.assign(tps)
        if args.offset is not None:
            consumer.seek(tps[0], args.offset)
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


def consume_records(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    printed = 0
    consumer = _open(args)
    last_record = time.monotonic()
    restore_sigterm = _interrupt_on_sigterm()
    try:
        while args.max_messages is None or printed < args.max_messages:
            wanted = None if args.max_messages is None else args.max_messages - printed
            records = consumer.poll_records(timeout_ms=200, max_records=wanted)
            for record in records:
                if args.format is not None:
                    out.write(format_line(record, args.format))
                elif args.json:
                    print(json_line(record), file=out)
                else:
                    print(default_line(record, print_headers=args.print_headers), file=out)
            printed += len(records)
            out.flush()
            if records:
                last_record = time.monotonic()
            elif (
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
