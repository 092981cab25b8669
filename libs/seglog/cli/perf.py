"""`seglog perf produce|consume`: load tests in the manner of Kafka's
kafka-producer-perf-test and kafka-consumer-perf-test.

produce: `--num-records` records of `--record-size` bytes through `Producer.send`, at most
`--throughput` records/s (-1: no limit); prints a progress line every 5 s, then records/s,
MB/s and send-to-acknowledgement latency percentiles (sampled, as Kafka's tool does).
Payloads are random and differ from record to record (a rotating pool of 4096), so
compression figures mean what they would for incompressible data; `--payload-file` takes the
values from a file's lines instead (Kafka's option), for realistic compressible data.
consume: reads `--messages` records from the beginning (or as `--group`), timed from the
first record received (the group join and the first fetch are reported apart), then
records/s, MB/s and the record age at receipt (now - record timestamp) percentiles: that is
end-to-end latency only for records produced while the consumer reads; for older records it
is their age, and the summary says which it printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from ..client.consumer import Consumer
from ..client.producer import Producer
from ..client.structs import TopicPartition
from ..errors import InvalidRequestError
from .options import parse_properties

PROGRESS_INTERVAL_S = 5.0
PAYLOAD_POOL = 4096  # distinct random values: no repeats within a batch to compress away
MAX_LATENCY_SAMPLES = 50_000


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    perf = sub.add_parser("perf", help="producer and consumer load tests")
    actions = perf.add_subparsers(dest="action", required=True)

    produce = actions.add_parser("produce", parents=[common], help="producer throughput")
    produce.add_argument("topic")
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, default=100, help="bytes per value")
    produce.add_argument("--throughput", type=int, default=-1, help="records/s cap, -1: none")
    produce.add_argument(
        "--acks", choices=("0", "1", "-1", "all"), default="all", help="default: all"
    )
    produce.add_argument(
        "--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none"
    )
    produce.add_argument("--batch-size", type=int, default=16384)
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.add_argument("--property", action="append", default=[], metavar="NAME=VALUE")
    produce.add_argument(
        "--payload-file", help="values from this file's lines, chosen in turn (not random)"
    )
    produce.set_defaults(handler=perf_produce)

    consume = actions.add_parser("consume", parents=[common], help="consumer throughput")
    consume.add_argument("topic")
    consume.add_argument("--messages", type=int, required=True)
    consume.add_argument("--group", help="read as this consumer group (default: no group)")
    consume.add_argument("--timeout-ms", type=int, default=10_000, help="give up when idle")
    consume.add_argument("--property", action="append", default=[], metavar="NAME=VALUE")
    consume.set_defaults(handler=perf_consume)


class _Stats:
    def __init__(self, total: int, out: TextIO) -> None:
        self.total = total
        self.out = out
        self.started = time.monotonic()
        self.window_start = self.started
        self.window_count = 0
        self.window_bytes = 0
        self.count = 0
        self.bytes = 0
        self.latencies_ms: list[float] = []

    def add(self, records: int, size: int) -> None:
        self.count += records
        self.bytes += size
        self.window_count += records
        self.window_bytes += size
        now = time.monotonic()
        if now - self.window_start >= PROGRESS_INTERVAL_S:
            elapsed = now - self.window_start
            print(
                f"{self.window_count} records, {self.window_count / elapsed:.1f} records/sec "
                f"({self.window_bytes / elapsed / 1e6:.2f} MB/sec), {self.count}/{self.total}",
                file=self.out,
                flush=True,
            )
            self.window_start, self.window_count, self.window_bytes = now, 0, 0

    def summary(self, what: str) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        line = (
            f"{self.count} records {what}, {self.count / elapsed:.1f} records/sec "
            f"({self.bytes / elapsed / 1e6:.2f} MB/sec)"
        )
        if self.latencies_ms:
            ordered = sorted(self.latencies_ms)

            def pct(p: float) -> float:
                return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

            line += (
                f", {sum(ordered) / len(ordered):.2f} ms avg latency, {ordered[-1]:.2f} ms max "
                f"latency, {pct(0.5):.0f} ms 50th, {pct(0.95):.0f} ms 95th, "
                f"{pct(0.99):.0f} ms 99th, {pct(0.999):.0f} ms 99.9th."
            )
        return line


def _latency_recorder(
    latencies_ms: list[float], sent_at: float
) -> Callable[[object, BaseException | None], None]:
    def record(_metadata: object, _error: BaseException | None) -> None:
        latencies_ms.append((time.monotonic() - sent_at) * 1000)

    return record


def perf_produce(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    config = {
        "acks": args.acks,
        "compression_type": args.compression,
        "batch_size": args.batch_size,
        "linger_ms": args.linger_ms,
        **parse_properties(args.property),
    }
    payloads = _payloads(args)
    stats = _Stats(args.num_records, out)
    sample_every = max(1, args.num_records // MAX_LATENCY_SAMPLES)
    latencies = stats.latencies_ms
    with Producer(args.bootstrap, **config) as producer:
        send = producer.send
        topic = args.topic
        started = time.monotonic()
        pool = len(payloads)
        window_bytes = 0
        for i in range(args.num_records):
            payload = payloads[i % pool]
            window_bytes += len(payload)
            if i % sample_every == 0:
                sent_at = time.monotonic()
                send(topic, payload, callback=_latency_recorder(latencies, sent_at))
            else:
                send(topic, payload)
            if i % 1000 == 999:
                stats.add(1000, window_bytes)
                window_bytes = 0
                if args.throughput > 0:
                    ahead_s = (i + 1) / args.throughput - (time.monotonic() - started)
                    if ahead_s > 0:
                        time.sleep(ahead_s)
        stats.add(args.num_records % 1000, window_bytes)
        producer.flush()
    print(stats.summary("sent"), file=out)
    return 0


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if args.payload_file is not None:
        with open(args.payload_file, "rb") as f:
            lines = [line.rstrip(b"\r\n") for line in f]
        payloads = [line for line in lines if line]
        if not payloads:
            raise InvalidRequestError(f"--payload-file {args.payload_file}: no non-empty lines")
        return payloads
    return [os.urandom(args.record_size) for _ in range(PAYLOAD_POOL)]


def perf_consume(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    config: dict[str, object] = {"auto_offset_reset": "earliest", **parse_properties(args.property)}
    with Consumer(args.bootstrap, group_id=args.group, **config) as consumer:
        if args.group is not None:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(
                [TopicPartition(args.topic, p) for p in consumer.partitions_for(args.topic)]
            )
        started = time.monotonic()
        started_ms = time.time_ns() / 1e6
        stats: _Stats | None = None
        last_record = started
        older_records = 0
        while stats is None or stats.count < args.messages:
            records = consumer.poll_records(timeout_ms=200)
            if not records:
                if (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                    break
                continue
            last_record = time.monotonic()
            if stats is None:  # the clock starts at the first record: joins are not reading
                print(
                    f"first record after {(last_record - started) * 1000:.0f} ms "
                    f"(assignment or group join, and the first fetch)",
                    file=out,
                )
                stats = _Stats(args.messages, out)
            stats.add(len(records), sum(len(r.value or b"") for r in records))
            newest = records[-1].timestamp_ms
            older_records += newest < started_ms
            if len(stats.latencies_ms) < MAX_LATENCY_SAMPLES:
                stats.latencies_ms.append(time.time_ns() / 1e6 - newest)
    if stats is None:
        print("0 records consumed", file=out)
        return 1
    what = (
        "record age at receipt, not end-to-end latency: records written before the run"
        if older_records
        else "end-to-end latency: records written during the run"
    )
    print(f"{stats.summary('consumed')} Latency figures are {what}.", file=out)
    return 0 if stats.count >= args.messages else 1
