"""`seglog groups list|describe|reset-offsets|delete|delete-offsets`, as
kafka-consumer-groups.sh: groups (one, or `--all-groups`) with per partition the committed
offset, the log end offset and the lag, or `--members` (`--verbose`: their partitions) or
`--state`, one line each; reset-offsets moves an inactive group's
committed offsets (a dry run printing the new offsets unless `--execute`, targets clamped to
each partition's [earliest, latest]); delete removes empty groups with their offsets;
delete-offsets removes a group's offsets for topics its members do not read."""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from ..client.admin import EARLIEST, LATEST, Admin
from ..client.structs import TopicPartition
from ..errors import InvalidRequestError
from ..rpc.status import error_from_code
from .options import plural


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
    describe.add_argument("group", nargs="?", help="the group (or give --all-groups)")
    describe.add_argument("--all-groups", action="store_true", help="describe every group")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="offsets and lag (the default)")
    view.add_argument("--members", action="store_true", help="one line per member")
    view.add_argument("--state", action="store_true", help="one line per group")
    describe.add_argument(
        "--verbose", action="store_true", help="with --members: each member's partitions"
    )
    describe.set_defaults(handler=describe_group)

    reset = actions.add_parser(
        "reset-offsets", parents=[common], help="move an inactive group's committed offsets"
    )
    reset.add_argument("group")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,P]",
        help="a topic, or some of its partitions (repeatable)",
    )
    scope.add_argument("--all-topics", action="store_true", help="every topic it committed")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="N")
    target.add_argument("--to-datetime", metavar="ISO-8601", help="e.g. 2026-11-23T10:00:00Z")
    target.add_argument(
        "--by-duration",
        type=_duration_ms,
        metavar="PnDTnHnMnS",
        help="to the first offset at or after now minus this ISO-8601 duration, e.g. PT30M",
    )
    target.add_argument(
        "--to-current", action="store_true", help="to the committed offset (clamped to the log)"
    )
    target.add_argument("--shift-by", type=int, metavar="N", help="from the committed offset")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(handler=reset_offsets)

    delete = actions.add_parser(
        "delete", parents=[common], help="delete empty groups with their committed offsets"
    )
    delete.add_argument("groups", nargs="+")
    delete.set_defaults(handler=delete_groups)
    delete_offsets = actions.add_parser(
        "delete-offsets", parents=[common], help="delete a group's offsets for some topics"
    )
    delete_offsets.add_argument("group")
    delete_offsets.add_argument(
        "--topic", action="append", required=True, metavar="TOPIC[:P,P]", help="(repeatable)"
    )
    delete_offsets.set_defaults(handler=delete_group_offsets, all_topics=False)


def list_groups(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        for group in admin.list_groups():
            print(f"{group.group_id}\t{group.state}\t{group.member_count} members", file=out)
    return 0


def describe_group(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if (args.group is None) == (not args.all_groups):
        raise InvalidRequestError("give a group or --all-groups (one of them)")
    with Admin(args.bootstrap) as admin:
        names = [args.group] if args.group else [g.group_id for g in admin.list_groups()]
        if args.state:
            _print_table([_STATE_HEADER, *(_state_row(admin, n) for n in names)], out)
            return 0
        if args.members:
            header = _MEMBERS_HEADER + (("ASSIGNMENT",) if args.verbose else ())
            rows = [row for n in names for row in _member_rows(admin, n, args.verbose)]
            _print_table([header, *rows], out)
            return 0
        for n, name in enumerate(names):
            if n:
                print(file=out)
            _describe_offsets(admin, name, out)
    return 0


# kafka-consumer-groups --describe --state / --members columns (the gateway coordinates every
# group, so no COORDINATOR column).
_STATE_HEADER = ("GROUP", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
_MEMBERS_HEADER = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")


def _state_row(admin: Admin, name: str) -> tuple[str, ...]:
    group = admin.describe_group(name)
    return (name, group.assignment_strategy or "-", group.state, str(len(group.members)))


def _member_rows(admin: Admin, name: str, verbose: bool) -> list[tuple[str, ...]]:
    rows = []
    for m in admin.describe_group(name).members:
        row: tuple[str, ...] = (
            name,
            m.member_id,
            m.client_host or "-",
            m.client_id or "-",
            str(len(m.assignment)),
        )
        if verbose:
            row += (_assignment_text(m.assignment) or "-",)
        rows.append(row)
    return rows


def _assignment_text(assignment: frozenset[TopicPartition]) -> str:
    """`t(0,1),u(2)` as kafka-consumer-groups --members --verbose prints an assignment."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(assignment):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items())


def _print_table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out
        )


def _describe_offsets(admin: Admin, name: str, out: TextIO) -> None:
    group = admin.describe_group(name)
    offsets = admin.list_group_offsets(name)
    owner = {tp: m for m in group.members for tp in m.assignment}
    # A partition assigned but never committed shows `-` for its offset and lag, as
    # kafka-consumer-groups does, and still its log end offset.
    uncommitted = [tp for tp in owner if tp not in offsets]
    ends = admin.list_offsets(dict.fromkeys(uncommitted, LATEST)) if uncommitted else {}
    print(
        f"Group: {group.group_id}\tState: {group.state}\tGeneration: {group.generation}\t"
        f"Strategy: {group.assignment_strategy or '-'}\tMembers: {len(group.members)}",
        file=out,
    )
    header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID")
    rows = [header]
    for tp in sorted(set(offsets) | set(owner)):
        offset = offsets.get(tp)
        member = owner.get(tp)
        end = str(offset.log_end_offset) if offset else str(ends[tp].offset) if tp in ends else "-"
        rows.append(
            (
                tp.topic,
                str(tp.partition),
                str(offset.committed) if offset else "-",
                end,
                str(offset.lag) if offset else "-",
                member.member_id if member else "-",
            )
        )
    _print_table(rows, out)


# java.time.Duration.parse's format, which kafka-consumer-groups' --by-duration takes.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _duration_ms(text: str) -> int:
    """An ISO-8601 duration (PnDTnHnMnS, as java.time.Duration.parse) in milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.group(i) for i in (2, 3, 4, 5)) or text.endswith("T"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected an ISO-8601 duration, e.g. PT1H30M")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    ms = (
        int(days or 0) * 86_400_000
        + int(hours or 0) * 3_600_000
        + int(minutes or 0) * 60_000
        + int(seconds or 0) * 1000
    )
    if fraction:
        part = int(fraction.ljust(3, "0")[:3])
        ms += -part if (seconds or "").startswith("-") else part
    return -ms if sign == "-" else ms


def _partitions(admin: Admin, args: argparse.Namespace) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(admin.list_group_offsets(args.group))
    chosen: list[TopicPartition] = []
    for spec in args.topic:
        topic, _, listed = spec.partition(":")
        (described,) = admin.describe_topics([topic])
        if described.error:
            raise error_from_code(described.error, described.error_message)
        count = len(described.partitions)
        numbers = [int(p) for p in listed.split(",")] if listed else list(range(count))
        bad = [p for p in numbers if not 0 <= p < count]
        if bad:
            raise InvalidRequestError(f"{topic} has partitions 0..{count - 1}, not {bad}")
        chosen += [TopicPartition(topic, p) for p in numbers]
    return sorted(set(chosen))


def _targets(
    admin: Admin, args: argparse.Namespace, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    earliest = {
        tp: o.offset for tp, o in admin.list_offsets(dict.fromkeys(partitions, EARLIEST)).items()
    }
    latest = {
        tp: o.offset for tp, o in admin.list_offsets(dict.fromkeys(partitions, LATEST)).items()
    }
    if args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif args.to_offset is not None:
        wanted = dict.fromkeys(partitions, args.to_offset)
    elif args.to_datetime is not None or args.by_duration is not None:
        if args.to_datetime is not None:
            moment = datetime.datetime.fromisoformat(args.to_datetime.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.UTC)
            timestamp_ms = int(moment.timestamp() * 1000)
        else:
            timestamp_ms = int(time.time() * 1000) - args.by_duration
        found = admin.list_offsets(dict.fromkeys(partitions, timestamp_ms))
        wanted = {tp: hit.offset if hit.offset >= 0 else latest[tp] for tp, hit in found.items()}
    elif args.to_current:
        committed = admin.list_group_offsets(args.group)
        wanted = {
            tp: committed[tp].committed if tp in committed else latest[tp] for tp in partitions
        }
    else:
        committed = admin.list_group_offsets(args.group)
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
            raise InvalidRequestError(f"--shift-by needs a committed offset; none for {names}")
        wanted = {tp: committed[tp].committed + args.shift_by for tp in partitions}
    return {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in partitions}


def reset_offsets(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        group = admin.describe_group(args.group)
        if group.members:
            raise InvalidRequestError(
                f"group {args.group} is {group.state} with {len(group.members)} active "
                f"members: offsets can be reset only while it is inactive"
            )
        partitions = _partitions(admin, args)
        targets = _targets(admin, args, partitions)
        rows = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
        rows += [(args.group, tp.topic, str(tp.partition), str(o)) for tp, o in targets.items()]
        _print_table(rows, out)
        if args.execute:
            admin.alter_group_offsets(args.group, targets)
        else:
            print(
                "Dry run: nothing changed; add --execute to commit these offsets.", file=sys.stderr
            )
    return 0


def delete_groups(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        results = admin.delete_groups(args.groups)
    status = 0
    for group_id, error in results.items():
        if error is None:
            print(f"Deleted group {group_id}.", file=out)
        else:
            print(f"seglog: {error.reason}: {error}", file=sys.stderr)
            status = 1
    return status


def delete_group_offsets(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with Admin(args.bootstrap) as admin:
        deleted = admin.delete_group_offsets(args.group, _partitions(admin, args))
    print(f"Deleted {plural(deleted, 'committed offset')} of group {args.group}.", file=out)
    return 0
