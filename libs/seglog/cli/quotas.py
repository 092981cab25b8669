"""`seglog configs describe|alter --entity-type users|clients --entity-name N|--entity-default`:
Kafka's client quotas (producer_byte_rate, consumer_byte_rate in bytes/s) as kafka-configs.sh
shows and changes them. Entity types pair with names in order: `--entity-type users
--entity-name alice --entity-type clients --entity-default` is alice's quota for every client
id without its own.

What it prints is kafka-configs' own lines (its ConfigCommand): "Completed updating config for
user alice." / "Completed updating default config for users in the cluster." after a change,
and "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1048576.0"
(a default entity as "the default user-principal"; rates as Java prints a double) per entity.
As kafka-configs, a describe naming several entity types shows the entities that have exactly
those types: `--entity-type users` shows user quotas, `--entity-type users --entity-type
clients` the quotas of (user, client id) pairs."""

from __future__ import annotations

import argparse
from decimal import Decimal
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
    kind, name = args.entity_type[0], next(iter(entity.values()))
    if name is None:
        print(f"Completed updating default config for {kind} in the cluster.", file=out)
    else:
        print(f"Completed updating config for {kind[:-1]} {name}.", file=out)
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
        settings = ", ".join(f"{k}={java_double(v)}" for k, v in sorted(values.items()))
        print(f"Quota configs for {_describe(found)} are {settings}", file=out)
    return 0


# kafka-configs' words for the quota API's entity types
_ENTITY_WORDS = {"user": "user-principal", "client-id": "client-id"}


def _describe(entity: dict[str, str | None]) -> str:
    """kafka-configs.sh's way: the user first, then the client id."""
    kinds = [kind for kind in ENTITY_TYPES.values() if kind in entity]
    return ", ".join(
        f"the default {_ENTITY_WORDS[kind]}"
        if entity[kind] is None
        else f"{_ENTITY_WORDS[kind]} '{entity[kind]}'"
        for kind in kinds
    )


def java_double(value: float) -> str:
    """`value` as Java's Double.toString writes it (what kafka-configs prints): the shortest
    digits that read back as the same double, plain from 10^-3 up to 10^7 ("1048576.0"),
    else as d.dddE<exponent> ("1.5E10"). Never rounded, unlike %g."""
    if value != value or value in (float("inf"), float("-inf")):
        return {True: "NaN"}.get(value != value, "Infinity" if value > 0 else "-Infinity")
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        plain = repr(magnitude)  # Python's shortest round-trip digits, never exponent here
        return sign + (plain if "." in plain else plain + ".0")
    _, digits, exponent = Decimal(repr(magnitude)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    power = len(mantissa) - 1 + exponent
    return f"{sign}{mantissa[0]}.{mantissa[1:] or '0'}E{power}"
