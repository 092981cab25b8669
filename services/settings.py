"""Each setting of a service declared once, on a field of the service's config dataclass
(`gateway/settings.py`, `storage_node/settings.py`): its name (Kafka's where Kafka has one),
its type (the field's annotation), its default (the field's), its unit (the name's last
word) and what it means. Everything else is derived from that declaration:

- the command line, the environment and properties files (command_line.py);
- the config object: a field left out keeps the declared default;
- what DescribeConfigs answers for the cluster (`seglog configs describe --cluster`);
- the README's settings tables (`python -m services.settings` prints them; a unit test
  checks that the README holds them as printed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")

ENV_PREFIX = "SEGLOG_"
# The node's flag for engine settings (Kafka's log.*, replica.* ...): NAME=VALUE, repeatable.
ENGINE_CONFIG_FLAG = "--config"
# Kafka's broker.session.timeout.ms and broker.heartbeat.interval.ms: the gateways and the
# nodes must agree on them (a node fences itself after the same timeout the gateways use).
BROKER_SESSION_TIMEOUT_MS = 9000
BROKER_HEARTBEAT_INTERVAL_MS = 2000
# The gateway's internal listener's port unless set (services/gateway/internal_listener.py),
# where a node calls a gateway address given without one. 7070 is the clients' gRPC port,
# `make run` puts its nodes on 7071-7073 and a second gateway (ETCD=1) on 7074, the
# production overlay's plaintext health port is 7079, Kafka's listeners are 9092 (9093 for
# that second gateway) and the Prometheus endpoints 9464 and up: 7090 is none of them, and
# reads as "the gateway's other port". Kafka's own controller port (9093) would collide with
# the second Kafka listener.
GATEWAY_INTERNAL_PORT = 7090
# Units as the last word of a setting's name, in the README's words.
_UNITS = {"ms": "ms", "bytes": "bytes", "seconds": "s", "minutes": "min", "hours": "h"}


@dataclass(frozen=True)
class Flag:
    """One command-line input; its environment variable is its spelling in capitals:
    `--tls-cert` reads SEGLOG_TLS_CERT."""

    spelling: str
    doc: str
    choices: tuple[str, ...] | None = None

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.spelling.removeprefix("--").replace("-", "_").upper()

    @property
    def dest(self) -> str:
        return self.spelling.removeprefix("--").replace("-", "_")

    @property
    def dotted(self) -> str:
        """The spelling a properties file may use: `--tls-cert` is `tls.cert`."""
        return self.spelling.removeprefix("--").replace("-", ".")


@dataclass(frozen=True)
class Setting:
    """A setting as declared, with its field's name, type and default filled in."""

    field: str
    name: str
    doc: str
    type: str
    default: Any
    flags: tuple[Flag, ...]
    # Text (one per flag) to the field's value; ValueError when the text is wrong. A setting
    # of several flags (TLS files) is built from all of them, given or not.
    parse: Callable[..., Any]
    # The node's settings given as `--config NAME=VALUE` with its engine settings.
    engine_config: bool
    # What DescribeConfigs shows: under which name (None: not shown) and how.
    described_name: str | None
    show: Callable[[Any], str]

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def composite(self) -> bool:
        return len(self.flags) > 1

    @property
    def unit(self) -> str:
        return _UNITS.get(self.name.rsplit(".", 1)[-1], "")


@dataclass(frozen=True)
class _Declaration:
    """What a field's metadata holds; the field fills in the rest (`settings_of`)."""

    doc: str
    name: str | None
    flag: str | None
    flags: tuple[Flag, ...] | None
    parse: Callable[..., Any] | None
    choices: tuple[str, ...] | None
    engine_config: bool
    described: bool
    described_name: str | None
    show: Callable[[Any], str]


_KEY = "setting"


def setting(
    default: _T,
    doc: str,
    *,
    name: str | None = None,
    flag: str | None = None,
    flags: tuple[Flag, ...] | None = None,
    parse: Callable[..., Any] | None = None,
    choices: tuple[str, ...] | None = None,
    engine_config: bool = False,
    described: bool = True,
    described_name: str | None = None,
    show: Callable[[Any], str] | None = None,
    repr: bool = True,
) -> _T:
    """A config field that is a setting. By default its name is the field's with dots
    (`offsets_retention_minutes`: `offsets.retention.minutes`), its one flag the field's with
    dashes, its type the field's annotation, and DescribeConfigs shows the value under its
    name as a properties file would write it (`shown_value`). `flags=()`: no flag (set in
    code, or with `engine_config` as the node's `--config NAME=VALUE`)."""
    declaration = _Declaration(
        doc=doc,
        name=name,
        flag=flag,
        flags=flags,
        parse=parse,
        choices=choices,
        engine_config=engine_config,
        described=described,
        described_name=described_name,
        show=show or shown_value,
    )
    return dataclasses.field(default=default, repr=repr, metadata={_KEY: declaration})


def required_setting(doc: str, *, parse: Callable[[str], Any] | None = None) -> Any:
    """A setting without a default: the flag (or its variable) must be given."""
    declaration = _Declaration(
        doc=doc,
        name=None,
        flag=None,
        flags=None,
        parse=parse,
        choices=None,
        engine_config=False,
        described=False,
        described_name=None,
        show=shown_value,
    )
    return dataclasses.field(metadata={_KEY: declaration})


def settings_of(config_class: Any) -> Iterator[Setting]:
    """The settings a config dataclass declares, in field order."""
    for field in dataclasses.fields(config_class):
        declared = field.metadata.get(_KEY)
        if declared is None:
            continue
        field_type = field.type if isinstance(field.type, str) else field.type.__name__
        choices = declared.choices or (("true", "false") if field_type == "bool" else None)
        flags = declared.flags
        if flags is None:
            spelling = declared.flag or "--" + field.name.replace("_", "-")
            flags = (Flag(spelling, declared.doc, choices),)
        name = declared.name or field.name.replace("_", ".")
        yield Setting(
            field=field.name,
            name=name,
            doc=declared.doc,
            type=field_type,
            default=field.default,
            flags=flags,
            parse=declared.parse or _PARSERS[field_type],
            engine_config=declared.engine_config,
            described_name=(declared.described_name or name) if declared.described else None,
            show=declared.show,
        )


# -- the values' text ------------------------------------------------------------------------


def true_or_false(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"must be true or false, got {text!r}")
    return text == "true"


def semicolon_list(text: str) -> tuple[str, ...]:
    """Kafka's super.users: `User:a;User:b`."""
    return tuple(item.strip() for item in text.split(";") if item.strip())


_PARSERS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "str": str,
    "str | None": str,
    "Path": Path,
    "bool": true_or_false,
    "tuple[str, ...]": semicolon_list,
}


def shown_default(value: Any) -> str:
    """A default as a command line or a properties file would write it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ";".join(value)
    return str(value)


def shown_value(value: Any) -> str:
    """A setting's value as kafka-configs prints one: `null` when unset, `true`/`false`,
    a list `;`-separated (Kafka's super.users), never a Python repr."""
    return "null" if value is None else shown_default(value)


# -- what is shown ---------------------------------------------------------------------------


def described_settings(config: Any) -> dict[str, str]:
    """The settings DescribeConfigs shows for the cluster, by name."""
    return {
        item.described_name: item.show(getattr(config, item.field))
        for item in settings_of(type(config))
        if item.described_name is not None
    }


def _readme_default(item: Setting) -> str:
    if item.required:
        return "required"
    if item.composite or item.default is None:
        return "-"
    shown = shown_default(item.default)
    text = f"`{shown}`" if shown else '`""`'
    return f"{text} {item.unit}" if item.unit else text


def markdown_table(config_class: type) -> str:
    """The README's table of a service's settings: one row per setting (a setting built
    from several flags lists them), Kafka's name first."""
    rows = ["| setting | flag (environment) | default | meaning |", "|---|---|---|---|"]
    for item in settings_of(config_class):
        names = f"`{item.name}`"
        if item.engine_config:
            where = f"`{ENGINE_CONFIG_FLAG} {item.name}=...`"
        elif item.flags:
            where = ", ".join(f"`{f.spelling}` (`{f.env}`)" for f in item.flags)
        else:
            where = "- (set in code)"
        doc = item.doc
        if item.composite:  # a file names each flag; DescribeConfigs shows the result
            names = ", ".join(f"`{f.dotted}`" for f in item.flags)
            doc = "; ".join(f.doc for f in item.flags)
        doc = doc.replace("<", "&lt;").replace(">", "&gt;")  # `<id>` is no HTML tag
        rows.append(f"| {names} | {where} | {_readme_default(item)} | {doc} |")
    return "\n".join(rows) + "\n"
