"""`seglog configs describe|alter --entity-type users|clients --entity-name N|--entity-default`:
Kafka's client quotas (producer_byte_rate, consumer_byte_rate in bytes/s) as kafka-configs.sh
shows and changes them. Entity types pair with names in order: `--entity-type users
--entity-name alice --entity-type clients --entity-default` is alice's quota for every client
id without its own."""

from __future__ import annotations

import argparse
from typing import TextIO

from ..client.admin import Admin
from ..errors import InvalidConfigError

# kafka-configs.sh's entity types -> the quota API's
ENTITY_TYPES = {"users": "user", "clients": "client-id"}
_DEFAULT = object()


def entity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--entity-name", action="append", dest="entity_names", help="with --entity-type"
    )
    parser.add_argument(
        "--entity-default",
        action="append_const",
        const=_DEFAULT,
        dest="entity_names",
        help="the entity type's default (every name without its own quota)",
    )


def _entity(args: argparse.Namespace, *, need_names: bool) -> dict[str, str | None]:
    kinds = args.entity_type or []
    names = args.entity_names or []
    if len(set(kinds)) != len(kinds):
        raise InvalidConfigError("each --entity-type at most once")
    if need_names and len(names) != len(kinds):
        raise InvalidConfigError(
            "give each --entity-type its --entity-name or --entity-default, in order"
        )
    if len(names) > len(kinds):
        raise InvalidConfigError("more entity names than --entity-type")
    return {
        ENTITY_TYPES[kind]: None if name is _DEFAULT else name
        for kind, name in zip(kinds, names, strict=False)
    }


def _rate(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidConfigError(f"{name}={value!r}: a rate in bytes/s") from None


def alter_quotas(
    args: argparse.Namespace, set_configs: dict[str, str], delete: list[str], out: TextIO
) -> int:
    entity = _entity(args, need_names=True)
    rates = {name: _rate(name, value) for name, value in set_configs.items()}
    with Admin(args.bootstrap) as admin:
        admin.alter_client_quotas(entity, rates, delete)
    print(f"Completed updating config for entity {_describe(entity)}.", file=out)
    return 0


def describe_quotas(args: argparse.Namespace, out: TextIO) -> int:
    named = _entity(args, need_names=False)
    with Admin(args.bootstrap) as admin:
        quotas = admin.describe_client_quotas()
    wanted_kinds = {ENTITY_TYPES[kind] for kind in args.entity_type}
    for found, values in quotas:
        if set(found) != wanted_kinds:
            continue
        if any(found.get(kind, "") != name for kind, name in named.items()):
            continue
        settings = ", ".join(f"{k}={v:g}" for k, v in sorted(values.items()))
        print(f"Quota configs for {_describe(found)} are {settings}", file=out)
    return 0


def _describe(entity: dict[str, str | None]) -> str:
    """kafka-configs.sh's way: the user first, then the client id."""
    kinds = [kind for kind in ENTITY_TYPES.values() if kind in entity]
    return ", ".join(
        f"{kind} {'<default>' if entity[kind] is None else repr(entity[kind])}" for kind in kinds
    )
