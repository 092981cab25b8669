"""`seglog produce TOPIC`: one record per line of stdin, sent through the Producer.

The partition of a line is `--partition` when given; else, with `--key-separator`, Kafka's
murmur2 of the key; else the sticky partitioner's choice. Batching follows the producer's
settings (`--batch-size`, `--linger-ms`, `--compression`, or any `--property name=value`).
Headers: `--header k=v` on every record (kcat -H), and with `--parse-headers` each line's own
(kafka-console-producer's parse.headers format). `--value-file` (and `--key-file`) send one
record whose value (and key) are a file's bytes.

Ctrl-C (as kafka-console-producer): what was read is sent for up to INTERRUPT_FLUSH_S, then
the command exits 130 with one line saying how many records were acknowledged; a second
Ctrl-C drops the rest at once. Never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from ..client.producer import Producer
from ..errors import InvalidPartitionsError, InvalidRequestError, SeglogError
from .options import parse_properties, plural

INTERRUPT_FLUSH_S = 5.0
_SIGNAL_CHECK_S = 0.1  # how soon a second Ctrl-C stops the flush
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    produce = sub.add_parser("produce", parents=[common], help="send stdin lines as records")
    produce.add_argument("topic")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument(
        "--key-separator", help="split each line at the first SEP into key and value"
    )
    produce.add_argument(
        "--acks", choices=("0", "1", "-1", "all"), default="all", help="default: all"
    )
    produce.add_argument(
        "--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none"
    )
    produce.add_argument("--batch-size", type=int, default=16384, help="bytes per batch")
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any producer setting, Kafka's name (repeatable), e.g. max.request.size=2097152",
    )
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a header on every record (repeatable), as kcat -H",
    )
    produce.add_argument(
        "--parse-headers",
        action="store_true",
        help="each line starts with its headers, as kafka-console-producer's parse.headers: "
        "k1:v1,k2:v2<TAB>[key<SEP>]value",
    )
    produce.add_argument("--headers-delimiter", default="\t", help="after the headers (TAB)")
    produce.add_argument("--headers-separator", default=",", help="between headers (,)")
    produce.add_argument("--headers-key-separator", default=":", help="in a header (:)")
    produce.add_argument(
        "--value-file", help="send one record whose value is this file's bytes (not stdin)"
    )
    produce.add_argument("--key-file", help="with --value-file: the record's key, from a file")
    produce.set_defaults(handler=produce_lines)


def _fixed_headers(items: list[str]) -> list[tuple[str, bytes | None]]:
    headers: list[tuple[str, bytes | None]] = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidRequestError(f"--header {item!r}: expected KEY=VALUE")
        headers.append((name, value.encode()))
    return headers


def _split_headers(
    line: bytes, args: argparse.Namespace, number: int
) -> tuple[list[tuple[str, bytes | None]], bytes]:
    """kafka-console-producer's parse.headers: `k1:v1,k2:v2<delimiter>rest`; a header
    without the key separator has a null value."""
    delimiter = args.headers_delimiter.encode()
    head, sep, rest = line.partition(delimiter)
    if not sep:
        raise InvalidRequestError(f"line {number}: no headers delimiter {delimiter!r}")
    headers: list[tuple[str, bytes | None]] = []
    for item in head.split(args.headers_separator.encode()) if head else []:
        name, sep, value = item.partition(args.headers_key_separator.encode())
        headers.append((name.decode("utf-8"), value if sep else None))
    return headers, rest


def produce_lines(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    lines: Iterable[bytes] = stdin or sys.stdin.buffer
    if args.value_file is not None:
        lines = []  # one record from files instead of stdin
    elif args.key_file is not None:
        raise InvalidRequestError("--key-file goes with --value-file")
    separator = args.key_separator.encode() if args.key_separator is not None else None
    fixed_headers = _fixed_headers(args.header)
    config = {
        "acks": args.acks,
        "compression_type": args.compression,
        "batch_size": args.batch_size,
        "linger_ms": args.linger_ms,
        **parse_properties(args.property),
    }
    failures: list[BaseException] = []
    acknowledged = [0]  # written on the sender thread only

    def on_completion(_metadata: object, error: BaseException | None) -> None:
        if error is None:
            acknowledged[0] += 1
        elif len(failures) < 10:
            failures.append(error)

    count = 0
    producer = Producer(args.bootstrap, **config)
    try:
        partitions = len(producer.partitions_for(args.topic))
        if args.partition is not None and not 0 <= args.partition < partitions:
            raise InvalidPartitionsError(
                f"--partition {args.partition}: {args.topic} has partitions 0..{partitions - 1}"
            )
        if args.value_file is not None:
            file_key = None if args.key_file is None else Path(args.key_file).read_bytes()
            producer.send(
                args.topic,
                Path(args.value_file).read_bytes(),
                key=file_key,
                partition=args.partition,
                headers=fixed_headers or None,
                callback=on_completion,
            )
            count += 1
        for line in lines:
            line = line.rstrip(b"\r\n")
            headers = fixed_headers
            if args.parse_headers:
                parsed, line = _split_headers(line, args, count + 1)
                headers = [*fixed_headers, *parsed]
            key: bytes | None = None
            if separator is not None:
                key, sep, value = line.partition(separator)
                if not sep:
                    raise SystemExit(f"seglog: line {count + 1} has no key separator {separator!r}")
            else:
                value = line
            producer.send(
                args.topic,
                value,
                key=key,
                partition=args.partition,
                headers=headers or None,
                callback=on_completion,
            )
            count += 1
        producer.flush()
    except KeyboardInterrupt:
        _close_interrupted(producer)
        print(
            f"seglog: interrupted: {plural(acknowledged[0], 'record')} of {count} sent to "
            f"{args.topic} acknowledged",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    finally:
        producer.close()  # at once after a flush or an interrupt; else sends what is queued
    if failures:
        error = failures[0]
        raise error if isinstance(error, SeglogError) else SeglogError(str(error))
    print(f"Produced {plural(count, 'record')} to {args.topic}.", file=sys.stderr)
    return 0


def _close_interrupted(producer: Producer) -> None:
    """Send what is queued for up to INTERRUPT_FLUSH_S, then drop the rest; a second Ctrl-C
    drops it at once. The second one only sets a flag: raised as KeyboardInterrupt inside
    the flush it printed a second, chained traceback."""
    again = threading.Event()
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: again.set()) if in_main else None
    try:
        deadline_s = time.monotonic() + INTERRUPT_FLUSH_S
        while not again.is_set():
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                break
            try:
                producer.flush(timeout=min(remaining_s, _SIGNAL_CHECK_S))
                break
            except TimeoutError:
                continue
        producer.close(timeout=0)
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
