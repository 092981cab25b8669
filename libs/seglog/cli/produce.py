"""`seglog produce TOPIC`: one record per line of stdin.

Lines become records in per-partition batches; a request carries up to `--request-bytes` of
batches and goes out when full and at the end of input. The partition of a line is
`--partition` when given; else, with `--key-separator`, Kafka's murmur2 of the key; else the
partitions in turn, one batch each (sticky, as Kafka's producer for unkeyed records).
"""

from __future__ import annotations

import argparse
import sys
from typing import BinaryIO

from ..client.gateway import GatewayClient
from ..client.partitioner import partition_for_key
from ..errors import InvalidPartitionsError
from ..records import RecordBatchBuilder
from ..records.compression import CompressionType
from ..rpc.status import error_from_code

CODECS = {c.name.lower(): c for c in CompressionType}


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
    produce.add_argument("--compression", choices=sorted(CODECS), default="none")
    produce.add_argument("--batch-size", type=int, default=16384, help="bytes per batch")
    produce.add_argument(
        "--request-bytes", type=int, default=1024 * 1024, help="bytes of batches per request"
    )
    produce.set_defaults(handler=produce_lines)


class _LineProducer:
    def __init__(self, client: GatewayClient, args: argparse.Namespace, partitions: int) -> None:
        self.client = client
        self.args = args
        self.partitions = partitions
        self.codec = CODECS[args.compression]
        self.open: dict[int, RecordBatchBuilder] = {}
        self.ready: dict[int, list[bytes]] = {}
        self.ready_bytes = 0
        self.sticky = 0
        self.sent = 0

    def partition_of(self, key: bytes | None) -> int:
        if self.args.partition is not None:
            return int(self.args.partition)
        if key is not None:
            return partition_for_key(key, self.partitions)
        return self.sticky

    def add(self, key: bytes | None, value: bytes) -> None:
        partition = self.partition_of(key)
        builder = self.open.get(partition)
        if builder is None:
            builder = self.open[partition] = RecordBatchBuilder(
                compression=self.codec, max_bytes=self.args.batch_size
            )
        if not builder.append(key, value):
            self.close_batch(partition)
            builder = self.open[partition] = RecordBatchBuilder(
                compression=self.codec, max_bytes=max(self.args.batch_size, len(value) + 1024)
            )
            builder.append(key, value)

    def close_batch(self, partition: int) -> None:
        builder = self.open.pop(partition, None)
        if builder is None or builder.record_count == 0:
            return
        batch = builder.build()
        self.ready.setdefault(partition, []).append(batch)
        self.ready_bytes += len(batch)
        if self.args.partition is None and self.args.key_separator is None:
            self.sticky = (self.sticky + 1) % self.partitions  # next batch, next partition
        if self.ready_bytes >= self.args.request_bytes:
            self.send()

    def send(self) -> None:
        if not self.ready:
            return
        batches = {p: b"".join(parts) for p, parts in self.ready.items()}
        self.ready, self.ready_bytes = {}, 0
        for result in self.client.produce(self.args.topic, batches, acks=self.args.acks):
            if result.error:
                raise error_from_code(result.error, result.error_message)
        self.sent += 1

    def finish(self) -> None:
        for partition in list(self.open):
            self.close_batch(partition)
        self.send()


def produce_lines(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    lines = stdin or sys.stdin.buffer
    separator = args.key_separator.encode() if args.key_separator is not None else None
    with GatewayClient(args.bootstrap) as client:
        partitions = len(client.describe_topic(args.topic).partitions)
        if args.partition is not None and not 0 <= args.partition < partitions:
            raise InvalidPartitionsError(
                f"--partition {args.partition}: {args.topic} has partitions 0..{partitions - 1}"
            )
        producer = _LineProducer(client, args, partitions)
        count = 0
        for line in lines:
            line = line.rstrip(b"\r\n")
            key: bytes | None = None
            if separator is not None:
                key, sep, value = line.partition(separator)
                if not sep:
                    raise SystemExit(f"seglog: line {count + 1} has no key separator {separator!r}")
            else:
                value = line
            producer.add(key, value)
            count += 1
        producer.finish()
    print(f"Produced {count} records to {args.topic}.", file=sys.stderr)
    return 0
