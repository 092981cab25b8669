"""Option parsing the CLI commands share."""

from __future__ import annotations

from ..errors import InvalidConfigError


def parse_properties(pairs: list[str]) -> dict[str, str]:
    """`name=value` strings (Kafka's dotted names allowed) into a config mapping."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InvalidConfigError(f"--property {pair!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def plural(count: int, noun: str) -> str:
    """'1 record', '2 records'."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
