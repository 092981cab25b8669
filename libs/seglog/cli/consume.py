"""`seglog consume TOPIC`: print records as `partition offset timestamp key value`, tab
separated (key `null` when absent).

Start: the log end (new records only, as Kafka's console consumer), `--from-beginning`,
`--offset N` (with `--partition`), or `--timestamp MS` (the first record at or after it, found
through the time index). Stops after `--max-messages`, after `--timeout-ms` without a new
record, or on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from ..client.gateway import EARLIEST, LATEST, FetchPosition, GatewayClient
from ..errors import InvalidRequestError, OffsetOutOfRangeError
from ..records import iter_records
from ..rpc.status import error_from_code


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
    consume.add_argument("--max-messages", type=int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=int, help="stop when no record arrived for this long")
    consume.set_defaults(handler=consume_records)


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def start_offsets(client: GatewayClient, args: argparse.Namespace) -> dict[int, int]:
    description = client.describe_topic(args.topic)
    partitions = [p.partition for p in description.partitions]
    if args.partition is not None:
        if args.partition not in partitions:
            raise InvalidRequestError(
                f"--partition {args.partition}: {args.topic} has partitions "
                f"0..{len(partitions) - 1}"
            )
        partitions = [args.partition]
    if args.offset is not None:
        if args.partition is None:
            raise InvalidRequestError("--offset needs --partition")
        return {args.partition: args.offset}
    if args.timestamp is not None:
        wanted = dict.fromkeys(partitions, args.timestamp)
    else:
        wanted = dict.fromkeys(partitions, EARLIEST if args.from_beginning else LATEST)
    offsets = {}
    for partition, result in client.list_offsets(args.topic, wanted).items():
        if result.error:
            raise error_from_code(result.error, result.error_message)
        if result.offset < 0:  # nothing at or after the timestamp: wait at the end
            end = client.list_offsets(args.topic, {partition: LATEST})[partition]
            offsets[partition] = end.offset
        else:
            offsets[partition] = result.offset
    return offsets


def consume_records(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    printed = 0
    with GatewayClient(args.bootstrap) as client:
        offsets = start_offsets(client, args)
        last_record = time.monotonic()
        try:
            while args.max_messages is None or printed < args.max_messages:
                positions = [FetchPosition(args.topic, p, o) for p, o in sorted(offsets.items())]
                got = False
                for message in client.fetch(positions, max_wait_ms=500):
                    if message.error:
                        error = error_from_code(message.error, message.error_message)
                        if isinstance(error, OffsetOutOfRangeError):
                            raise error
                        continue
                    for record in iter_records(message.records):
                        if record.offset < offsets[message.partition]:
                            continue
                        print(
                            f"{message.partition}\t{record.offset}\t{record.timestamp_ms}\t"
                            f"{_text(record.key)}\t{_text(record.value)}",
                            file=out,
                        )
                        offsets[message.partition] = record.offset + 1
                        printed += 1
                        got = True
                        if args.max_messages is not None and printed >= args.max_messages:
                            break
                    if args.max_messages is not None and printed >= args.max_messages:
                        break
                out.flush()
                if got:
                    last_record = time.monotonic()
                elif (
                    args.timeout_ms is not None
                    and (time.monotonic() - last_record) * 1000 >= args.timeout_ms
                ):
                    break
        except KeyboardInterrupt:
            pass
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0
