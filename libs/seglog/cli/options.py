"""Option parsing the CLI commands share."""

from __future__ import annotations

from pathlib import Path

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


def read_properties_file(path: str) -> dict[str, str]:
    """A Java properties file as Kafka's tools read `--producer.config`/`--consumer.config`:
    `name=value` or `name: value` lines, `#` and `!` comments, blank lines skipped."""
    settings: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidConfigError(f"{path}: cannot read: {exc.strerror}") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise InvalidConfigError(f"{path}:{number}: expected NAME=VALUE, got {raw!r}")
        settings[line[:cut].strip()] = line[cut + 1 :].strip()
    return settings


def client_settings(config_file: str | None, pairs: list[str]) -> dict[str, str]:
    """A client's settings from `--producer.config`/`--consumer.config` and then its
    `--producer-property`/`--consumer-property` pairs, which win, as in Kafka's tools."""
    settings = read_properties_file(config_file) if config_file else {}
    settings.update(parse_properties(pairs))
    return settings


def plural(count: int, noun: str) -> str:
    """'1 record', '2 records'."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
