"""`seglog configs describe|alter --topic T`: a topic's configs as kafka-configs.sh shows and
changes them: every config with its effective value and where it comes from (`topic` for the
topic's override, `node` for the leader node's `--config log.*` default, `default` for
Kafka's), and `--add-config k=v,k2=v2` (a list in brackets: `cleanup.policy=[compact,delete]`)
/ `--delete-config k` applied together after one validation of the result. With
`--entity-type users|clients` (once or both) and `--entity-name N` / `--entity-default` for
each, client quotas instead (cli/quotas.py), as kafka-configs.sh takes them."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TextIO

from ..client.admin import Admin
from ..errors import InvalidConfigError
from .quotas import ENTITY_TYPES, alter_quotas, describe_quotas, entity_arguments


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    configs = sub.add_parser("configs", help="describe and alter topic configs")
    actions = configs.add_subparsers(dest="action", required=True)
    describe = actions.add_parser("describe", parents=[common], help="every config and source")
    target = describe.add_mutually_exclusive_group(required=True)
    target.add_argument("--topic")
    target.add_argument(
        "--cluster", action="store_true", help="the gateway's settings and nodes' defaults"
    )
    target.add_argument(
        "--entity-type",
        action="append",
        choices=ENTITY_TYPES,
        help="client quotas of users and/or clients (with --entity-name or --entity-default)",
    )
    describe.add_argument(
        "--overrides-only", action="store_true", help="only what the topic sets itself"
    )
    entity_arguments(describe)
    describe.set_defaults(handler=describe_configs)
    alter = actions.add_parser("alter", parents=[common], help="set and delete overrides")
    alter_target = alter.add_mutually_exclusive_group(required=True)
    alter_target.add_argument("--topic")
    alter_target.add_argument(
        "--entity-type",
        action="append",
        choices=ENTITY_TYPES,
        help="a client quota entity: users and/or clients (Kafka's producer_byte_rate, "
        "consumer_byte_rate)",
    )
    entity_arguments(alter)
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    alter.set_defaults(handler=alter_configs)


def _pairs(items: list[str]) -> dict[str, str]:
    """`k=v,k2=v2` settings; a list value in brackets, as kafka-configs.sh takes it
    (`cleanup.policy=[compact,delete]`), keeps its commas."""
    out = {}
    for item in items:
        for pair in re.findall(r"[^,\[]*(?:\[[^\]]*\])?[^,]*", item):
            if not pair:
                continue
            name, sep, value = pair.partition("=")
            if not sep or not name:
                raise InvalidConfigError(f"--add-config {pair!r}: expected NAME=VALUE")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[name.strip()] = value
    return out


def describe_configs(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if args.entity_type:
        return describe_quotas(args, out)
    if args.cluster:
        with Admin(args.bootstrap) as admin:
            cluster = admin.describe_cluster_configs()
        for scope, settings in cluster.items():
            print(f"Configs for {scope}:", file=out)
            for name, value in sorted(settings.items()):
                print(f"  {name}={value}", file=out)
        return 0
    with Admin(args.bootstrap) as admin:
        entries = admin.describe_configs(args.topic)
    print(f"Configs for topic {args.topic}:", file=out)
    for name, (value, source) in sorted(entries.items()):
        if args.overrides_only and source != "topic":
            continue
        print(f"  {name}={value}\tsource={source}", file=out)
    return 0


def alter_configs(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    set_configs = _pairs(args.add_config)
    delete = [n.strip() for item in args.delete_config for n in item.split(",") if n.strip()]
    if not set_configs and not delete:
        raise InvalidConfigError("nothing to change: give --add-config or --delete-config")
    if args.entity_type:
        return alter_quotas(args, set_configs, delete, out)
    with Admin(args.bootstrap) as admin:
        admin.alter_configs(args.topic, set_configs, delete)
    print(f"Completed updating configs for topic {args.topic}.", file=out)
    return 0
