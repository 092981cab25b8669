"""`seglog records delete --topic T [--partition P] [--offset O]`: Kafka's DeleteRecords
(kafka-delete-records.sh): every record before the offset (-1, the default: the high
watermark, so everything consumers can read) is deleted from the partitions named (every
partition of the topic when none is)."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ..client.admin import Admin
from ..client.structs import TopicPartition


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    records = sub.add_parser("records", help="delete the records before an offset")
    actions = records.add_subparsers(dest="action", required=True)
    delete = actions.add_parser(
        "delete", parents=[common], help="move partitions' log start offset forward"
    )
    delete.add_argument("--topic", required=True)
    delete.add_argument(
        "--partition", type=int, action="append", default=[], help="repeatable; default: all"
    )
    delete.add_argument(
        "--offset", type=int, default=-1, help="the new log start offset; -1: the high watermark"
    )
    delete.set_defaults(handler=delete_records)


def delete_records(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        partitions = args.partition or [
            p.partition for p in admin.describe_topic(args.topic).partitions
        ]
        starts = admin.delete_records(
            {TopicPartition(args.topic, p): args.offset for p in partitions}
        )
    for tp, start in sorted(starts.items()):
        print(f"{tp.topic}-{tp.partition}: log start offset {start}", file=out)
    return 0
