"""`seglog produce TOPIC`: one record per line of stdin, sent through the Producer.

The partition of a line is `--partition` when given; else, with `--key-separator`, Kafka's
murmur2 of the key; else the sticky partitioner's choice. Batching follows the producer's
settings (`--batch-size`, `--linger-ms`, `--compression`, or any `--property name=value`).
Headers: `--header k=v` on every record (kcat -H), and with `--parse-headers` each line's own
(kafka-console-producer's parse.headers format). `--value-file` (and `--key-file`) send one
record whose value (and key) are a file's bytes.

As kafka-console-producer: `--property` takes its line reader's properties (parse.key,
key.separator — a tab by default —, parse.headers, headers.delimiter, headers.separator,
headers.key.separator, null.marker: a key, value or header value equal to it is sent as null,
so a tombstone is `KEY<SEP>NULL`; ignore.error: a line without the key separator is sent as a
value with no key); any other `--property` name is a producer setting, as are
`--producer-property` and the lines of `--producer.config FILE`.

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
from .options import client_settings, parse_properties, plural

INTERRUPT_FLUSH_S = 5.0
_SIGNAL_CHECK_S = 0.1  # how soon a second Ctrl-C stops the flush
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

# kafka-console-producer's LineMessageReader properties, with its defaults.
READER_DEFAULTS = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.marker": "",
    "ignore.error": "false",
}


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
        help="a line-reader property of kafka-console-producer (parse.key=true, "
        "key.separator, parse.headers, headers.delimiter, headers.separator, "
        "headers.key.separator, null.marker, ignore.error) or any producer setting, Kafka's "
        "name (repeatable), e.g. max.request.size=2097152",
    )
    produce.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a producer setting, Kafka's name (repeatable), as kafka-console-producer",
    )
    produce.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="FILE",
        help="producer settings from a properties file (NAME=VALUE lines)",
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


def _split_properties(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """--property into (line-reader properties, producer settings); a reader value is kept
    as given (a separator may be a space or a tab). The reader's properties set the flags
    they mirror, so the rest of the command reads one set of options."""
    reader: dict[str, str] = {}
    rest = []
    for pair in args.property:
        name, sep, value = pair.partition("=")
        if sep and name.strip() in READER_DEFAULTS:
            reader[name.strip()] = value
        else:
            rest.append(pair)
    for flag in ("parse.key", "parse.headers", "ignore.error"):
        if reader.get(flag, "false").lower() not in ("true", "false"):
            raise InvalidRequestError(f"--property {flag}={reader[flag]!r}: expected true or false")
    if reader.get("parse.key", "false").lower() == "true":
        args.key_separator = reader.get("key.separator", READER_DEFAULTS["key.separator"])
    if reader.get("parse.headers", "false").lower() == "true":
        args.parse_headers = True
    for name in ("headers.delimiter", "headers.separator", "headers.key.separator"):
        if name in reader:
            setattr(args, name.replace(".", "_"), reader[name])
    settings = client_settings(args.producer_config, args.producer_property)
    settings.update(parse_properties(rest))
    return reader, settings


class _NullMarker:
    """kafka-console-producer's null.marker: a key, value or header value equal to it is
    null (no marker: nothing is)."""

    def __init__(self, marker: str) -> None:
        self._marker = marker.encode() if marker else None

    def __call__(self, field: bytes | None) -> bytes | None:
        return None if self._marker is not None and field == self._marker else field


def produce_lines(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    lines: Iterable[bytes] = stdin or sys.stdin.buffer
    if args.value_file is not None:
        lines = []  # one record from files instead of stdin
    elif args.key_file is not None:
        raise InvalidRequestError("--key-file goes with --value-file")
    reader, settings = _split_properties(args)
    nulled = _NullMarker(reader.get("null.marker", ""))
    ignore_error = reader.get("ignore.error", "false").lower() == "true"
    separator = args.key_separator.encode() if args.key_separator is not None else None
    fixed_headers = _fixed_headers(args.header)
    flags = {
        "acks": args.acks,
        "compression_type": args.compression,
        "batch_size": args.batch_size,
        "linger_ms": args.linger_ms,
    }
    # A setting given by its Kafka name replaces the flag's value (each flag has a default,
    # so the flag cannot tell it was not given).
    named = {name.replace(".", "_") for name in settings}
    config = {**{k: v for k, v in flags.items() if k not in named}, **settings}
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
                headers = [*fixed_headers, *((name, nulled(v)) for name, v in parsed)]
            key: bytes | None = None
            value: bytes | None = line
            if separator is not None:
                key, sep, value = line.partition(separator)
                if not sep and ignore_error:
                    key, value = None, line
                elif not sep:
                    raise SystemExit(f"seglog: line {count + 1} has no key separator {separator!r}")
            producer.send(
                args.topic,
                nulled(value),
                key=nulled(key),
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
