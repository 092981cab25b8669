"""`seglog acls add|list|remove`: Kafka's ACLs as kafka-acls.sh manages them.

seglog acls add --allow-principal User:alice --operation Write --topic orders
seglog acls add --deny-principal User:bob --operation Read --topic pay \\
        --resource-pattern-type prefixed
seglog acls add --allow-principal User:carol --operation Read --group billing
seglog acls list [--principal User:alice] [--topic orders]
seglog acls remove --allow-principal User:alice --operation Write --topic orders
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ..client.admin import Admin
from ..errors import InvalidRequestError
from ..security.acls import CLUSTER_NAME, OPERATIONS, AclBinding


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    acls = sub.add_parser("acls", help="add, list and remove ACLs")
    actions = acls.add_subparsers(dest="action", required=True)
    for name, handler in (("add", add_acls), ("remove", remove_acls)):
        action = actions.add_parser(name, parents=[common], help=f"{name} ACLs")
        action.add_argument("--allow-principal", action="append", default=[])
        action.add_argument("--deny-principal", action="append", default=[])
        action.add_argument("--operation", action="append", choices=OPERATIONS, required=True)
        action.add_argument("--host", default="*")
        _resource(action)
        action.add_argument(
            "--resource-pattern-type", choices=("literal", "prefixed"), default="literal"
        )
        action.set_defaults(handler=handler)
    listing = actions.add_parser("list", parents=[common], help="the ACLs, or those matching")
    listing.add_argument("--principal", default="")
    _resource(listing, required=False)
    listing.set_defaults(handler=list_acls)


def _resource(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    target = parser.add_mutually_exclusive_group(required=required)
    target.add_argument("--topic")
    target.add_argument("--group")
    target.add_argument("--cluster", action="store_true")


def _target(args: argparse.Namespace) -> tuple[str, str]:
    if args.topic:
        return "topic", args.topic
    if args.group:
        return "group", args.group
    if getattr(args, "cluster", False):
        return "cluster", CLUSTER_NAME
    return "", ""


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    principals = [(p, "allow") for p in args.allow_principal]
    principals += [(p, "deny") for p in args.deny_principal]
    if not principals:
        raise InvalidRequestError("name at least one --allow-principal or --deny-principal")
    kind, name = _target(args)
    return [
        AclBinding(
            principal, args.host, kind, args.resource_pattern_type, name, op, permission
        ).check()
        for principal, permission in principals
        for op in args.operation
    ]


def add_acls(args: argparse.Namespace, out: TextIO | None = None) -> int:
    bindings = _bindings(args)
    with Admin(args.bootstrap) as admin:
        admin.create_acls(bindings)
    print(f"Added {len(bindings)} ACLs.", file=out or sys.stdout)
    return 0


def remove_acls(args: argparse.Namespace, out: TextIO | None = None) -> int:
    with Admin(args.bootstrap) as admin:
        removed = admin.delete_acls(_bindings(args))
    print(f"Removed {removed} ACLs.", file=out or sys.stdout)
    return 0


def list_acls(args: argparse.Namespace, out: TextIO | None = None) -> int:
    kind, name = _target(args)
    with Admin(args.bootstrap) as admin:
        found = admin.describe_acls(args.principal, kind, name)
    for a in found:
        print(
            f"{a.permission.upper()}\t{a.principal}\t{a.operation}\t{a.resource_type}:"
            f"{a.pattern_type}:{a.resource_name}\thost={a.host}",
            file=out or sys.stdout,
        )
    return 0
