"""`seglog share consume TOPIC --group GROUP`: read a topic as a member of a share group (a
queue: other members of the group get other records), as Kafka's
kafka-console-share-consumer. Records print as `seglog consume` prints them (record_format.py)
with the delivery count last (`--json`: a `delivery_count` field).

Each printed record is accepted (`--release`: released, handed out again; `--reject`:
rejected, archived). Records a poll brought past `--max-messages` are released unprinted, so
none is acknowledged without being printed. Stops after `--max-messages`, after
`--timeout-ms` without a new record, on Ctrl-C or SIGTERM; closing sends the acknowledgements
and leaves the group.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

from ..client.share_acks import AcknowledgeType, ShareRecord
from ..client.share_consumer import ShareConsumer
from ..records.record import Record
from .consume import _interrupt_on_sigterm, _quiet_stdout
from .options import client_settings, plural
from .record_format import default_line, json_line

DEFAULT_MAX_POLL_RECORDS = 500


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    share = sub.add_parser("share", help="share groups (queues): read as a share group member")
    commands = share.add_subparsers(dest="share_command", required=True)
    consume = commands.add_parser(
        "consume", parents=[common], help="print records of a topic as a share group member"
    )
    consume.add_argument("topic")
    consume.add_argument("--group", required=True, help="the share group")
    kind = consume.add_mutually_exclusive_group()
    kind.add_argument(
        "--release", action="store_true", help="release each record (it is handed out again)"
    )
    kind.add_argument(
        "--reject", action="store_true", help="reject each record (archived, never again)"
    )
    consume.add_argument("--max-messages", type=int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=int, help="stop when no record arrived for this long")
    consume.add_argument("--json", action="store_true", help="one JSON object per record")
    consume.add_argument(
        "--print-headers", action="store_true", help="a headers column in the default output"
    )
    consume.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a share consumer setting, Kafka's name (repeatable)",
    )
    consume.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="FILE",
        help="share consumer settings from a properties file (NAME=VALUE lines)",
    )
    consume.set_defaults(handler=share_consume)


def _line(record: ShareRecord, args: argparse.Namespace) -> str:
    plain = Record(
        record.offset,
        record.timestamp_ms,
        record.key,
        record.value,
        record.headers,
        record.topic,
        record.partition,
    )
    if args.json:
        fields = json.loads(json_line(plain))
        fields["delivery_count"] = record.delivery_count
        return json.dumps(fields) + "\n"
    return f"{default_line(plain, print_headers=args.print_headers)}\t{record.delivery_count}\n"


def share_consume(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    settings: dict[str, object] = dict(
        client_settings(args.consumer_config, args.consumer_property)
    )
    if args.max_messages is not None:
        settings.setdefault("max_poll_records", min(DEFAULT_MAX_POLL_RECORDS, args.max_messages))
    settings["share_acknowledgement_mode"] = "explicit"
    kind = (
        AcknowledgeType.RELEASE
        if args.release
        else AcknowledgeType.REJECT
        if args.reject
        else AcknowledgeType.ACCEPT
    )
    consumer = ShareConsumer(args.bootstrap, group_id=args.group, **settings)
    consumer.subscribe([args.topic])
    printed = 0
    last_record = time.monotonic()
    restore_sigterm = _interrupt_on_sigterm()
    try:
        while args.max_messages is None or printed < args.max_messages:
            records = consumer.poll(timeout_ms=200)
            for record in records:
                if args.max_messages is not None and printed >= args.max_messages:
                    consumer.acknowledge(record, AcknowledgeType.RELEASE)  # not printed
                    continue
                out.write(_line(record, args))
                consumer.acknowledge(record, kind)
                printed += 1
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
