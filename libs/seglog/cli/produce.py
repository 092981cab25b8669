"""`seglog produce TOPIC`: one record per line of stdin, sent through the Producer.

The partition of a line is `--partition` when given; else, with `--key-separator`, Kafka's
murmur2 of the key; else the sticky partitioner's choice. Batching follows the producer's
settings (`--batch-size`, `--linger-ms`, `--compression`, or any `--property name=value`).
"""

from __future__ import annotations

import argparse
import sys
from typing import BinaryIO

from ..client.producer import Producer
from ..errors import InvalidPartitionsError, SeglogError
from .options import parse_properties, plural


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    produce = sub.add_parser("produce", parents=[common], help="send stdin lines as records")
    produce.add_argument("topic")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument(
        "--key-separator", help="split each line at the first SEP into key and value"
    )
    produce.add_argument("--acks", type=int, choices=(0, 1), default=1)
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
    produce.set_defaults(handler=produce_lines)


def produce_lines(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    lines = stdin or sys.stdin.buffer
    separator = args.key_separator.encode() if args.key_separator is not None else None
    config = {
        "acks": args.acks,
        "compression_type": args.compression,
        "batch_size": args.batch_size,
        "linger_ms": args.linger_ms,
        **parse_properties(args.property),
    }
    failures: list[BaseException] = []

    def on_completion(_metadata: object, error: BaseException | None) -> None:
        if error is not None and len(failures) < 10:
            failures.append(error)

    count = 0
    with Producer(args.bootstrap, **config) as producer:
        partitions = len(producer.partitions_for(args.topic))
        if args.partition is not None and not 0 <= args.partition < partitions:
            raise InvalidPartitionsError(
                f"--partition {args.partition}: {args.topic} has partitions 0..{partitions - 1}"
            )
        for line in lines:
            line = line.rstrip(b"\r\n")
            key: bytes | None = None
            if separator is not None:
                key, sep, value = line.partition(separator)
                if not sep:
                    raise SystemExit(f"seglog: line {count + 1} has no key separator {separator!r}")
            else:
                value = line
            producer.send(
                args.topic, value, key=key, partition=args.partition, callback=on_completion
            )
            count += 1
        producer.flush()
    if failures:
        error = failures[0]
        raise error if isinstance(error, SeglogError) else SeglogError(str(error))
    print(f"Produced {plural(count, 'record')} to {args.topic}.", file=sys.stderr)
    return 0
