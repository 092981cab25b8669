"""`seglog transactions list|describe`, as kafka-transactions.sh's: the transactions the
gateway coordinates (id, producer id, state; `--state` filters), or one transactional id's
state, producer id and epoch, timeout, start and partitions."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ..client.admin import Admin


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    transactions = sub.add_parser("transactions", help="list and describe transactions")
    actions = transactions.add_subparsers(dest="action", required=True)
    listing = actions.add_parser(
        "list", parents=[common], help="transactional ids, producer ids and states"
    )
    listing.add_argument(
        "--state", action="append", default=[], help="only this state (Kafka's names; repeat)"
    )
    listing.set_defaults(handler=list_transactions)
    describe = actions.add_parser(
        "describe", parents=[common], help="one transactional id's transaction"
    )
    describe.add_argument("transactional_id")
    describe.set_defaults(handler=describe_transaction)


def list_transactions(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        for t in admin.list_transactions(states=args.state):
            print(f"{t.transactional_id}\t{t.producer_id}\t{t.state}", file=out)
    return 0


def describe_transaction(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        t = admin.describe_transaction(args.transactional_id)
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in t.partitions) or "-"
    print(
        f"{t.transactional_id}\t{t.state}\tproducer {t.producer_id} epoch {t.producer_epoch}"
        f"\ttimeout {t.timeout_ms} ms\tstarted {t.start_ms}\t{partitions}",
        file=out,
    )
    return 0
