"""`seglog groups list|describe`: consumer groups, their members and assignments, and per
partition the committed offset, the log end offset and the lag (as kafka-consumer-groups.sh
--describe prints them)."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ..client.admin import Admin


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    groups = sub.add_parser("groups", help="list and describe consumer groups")
    actions = groups.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[common], help="group ids and states")
    listing.set_defaults(handler=list_groups)
    describe = actions.add_parser(
        "describe", parents=[common], help="members, assignment, committed offsets and lag"
    )
    describe.add_argument("group")
    describe.set_defaults(handler=describe_group)


def list_groups(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        for group in admin.list_groups():
            print(f"{group.group_id}\t{group.state}\t{group.member_count} members", file=out)
    return 0


def describe_group(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        group = admin.describe_group(args.group)
        offsets = admin.list_group_offsets(args.group)
    print(
        f"Group: {group.group_id}\tState: {group.state}\tGeneration: {group.generation}\t"
        f"Strategy: {group.assignment_strategy or '-'}\tMembers: {len(group.members)}",
        file=out,
    )
    owner = {tp: m for m in group.members for tp in m.assignment}
    header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID")
    rows = [header]
    for tp in sorted(set(offsets) | set(owner)):
        offset = offsets.get(tp)
        member = owner.get(tp)
        rows.append(
            (
                tp.topic,
                str(tp.partition),
                str(offset.committed) if offset else "-",
                str(offset.log_end_offset) if offset else "-",
                str(offset.lag) if offset else "-",
                member.member_id if member else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out
        )
    return 0
