"""Each setting of a service declared once, on a field of the service's config dataclass
(`gateway/settings.py`, `storage_node/settings.py`): its name (Kafka's where Kafka has one),
its type (the field's annotation), its default (the field's), its unit (the name's last
word) and what it means. Everything else is derived from that declaration:

- the command line: each flag with its environment variable (`--session-timeout-ms` reads
  SEGLOG_SESSION_TIMEOUT_MS when the flag is not given);
- properties files (`--config-file PATH` or SEGLOG_CONFIG_FILE, as Kafka's
  server.properties): a line names a setting by its Kafka name or by a flag's spelling with
  dots (`session.timeout.ms`, as files were written before), and a flag given on the
  command line wins over the file;
- the config object: a field left out keeps the declared default;
- what DescribeConfigs answers for the cluster (`seglog configs describe --cluster`);
- the README's settings tables (`python -m services.settings` prints them; a unit test
  checks that the README holds them as printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

_T = TypeVar("_T")

CONFIG_FILE_ENV = "SEGLOG_CONFIG_FILE"
ENV_PREFIX = "SEGLOG_"
# The node's flag for engine settings (Kafka's log.*, replica.* ...): NAME=VALUE, repeatable.
ENGINE_CONFIG_FLAG = "--config"
# Kafka's broker.session.timeout.ms and broker.heartbeat.interval.ms: the gateways and the
# nodes must agree on them (a node fences itself after the same timeout the gateways use).
BROKER_SESSION_TIMEOUT_MS = 9000
BROKER_HEARTBEAT_INTERVAL_MS = 2000
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
    show: Callable[[Any], str] = str,
    repr: bool = True,
) -> _T:
    """A config field that is a setting. By default its name is the field's with dots
    (`offsets_retention_minutes`: `offsets.retention.minutes`), its one flag the field's with
    dashes, its type the field's annotation, and DescribeConfigs shows `str(value)` under its
    name. `flags=()`: no flag (set in code, or with `engine_config` as the node's
    `--config NAME=VALUE`)."""
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
        show=show,
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
        show=str,
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


def _shown_default(value: Any) -> str:
    """A default as a command line or a properties file would write it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ";".join(value)
    return str(value)


# -- the command line ------------------------------------------------------------------------


def environment_variables(config_class: type) -> set[str]:
    """Every variable the service's flags read (the config file's too)."""
    return {f.env for s in settings_of(config_class) for f in s.flags} | {CONFIG_FILE_ENV}


def _add_flags(parser: argparse.ArgumentParser, declared: Setting) -> None:
    for flag in declared.flags:
        shown = ""
        if not declared.composite and declared.default not in (None, dataclasses.MISSING):
            shown = f"; default {_shown_default(declared.default)}"
        from_env = os.environ.get(flag.env)
        parser.add_argument(
            flag.spelling,
            dest=flag.dest,
            default=from_env,
            required=declared.required and from_env is None,
            choices=flag.choices,
            help=f"{flag.doc} (env {flag.env}{shown})",
        )


def _engine_config_help(settings: list[Setting]) -> str:
    names = ", ".join(f"{s.name}={_shown_default(s.default)}" for s in settings if s.engine_config)
    return (
        "engine setting with Kafka's name, e.g. log.segment.bytes=1048576 or "
        f"retention.check.interval.ms=1000, replica.lag.time.max.ms=10000; and {names} "
        "(repeatable)"
    )


def parse_command_line(config_class: type[_T], prog: str, argv: list[str] | None = None) -> _T:
    """The config from the command line, the environment and the config file. A config
    class with an `engine_configs` field (the node) takes `--config NAME=VALUE`: its
    engine-config settings by name, everything else into that field."""
    declared = list(settings_of(config_class))
    engine = "engine_configs" in {f.name for f in dataclasses.fields(cast(Any, config_class))}
    parser = argparse.ArgumentParser(prog=prog)
    for item in declared:
        _add_flags(parser, item)
    if engine:
        parser.add_argument(
            ENGINE_CONFIG_FLAG,
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help=_engine_config_help(declared),
        )
    parser.add_argument(
        "--config-file",
        metavar="PATH",
        help=f"settings by Kafka's names, one name=value per line, e.g. a mounted ConfigMap "
        f"(env {CONFIG_FILE_ENV}); flags given on the command line win",
    )
    args = parser.parse_args(config_file_args(argv, parser, declared, engine=engine))
    values: dict[str, Any] = {}
    engine_configs = _engine_configs(parser, args.config) if engine else {}
    for item in declared:
        try:
            if item.engine_config and item.name in engine_configs:
                text = engine_configs.pop(item.name)
                values[item.field] = _parse(item, text, f"{ENGINE_CONFIG_FLAG} {item.name}")
            elif item.composite:
                values[item.field] = item.parse(*(getattr(args, f.dest) for f in item.flags))
            elif item.flags and getattr(args, item.flags[0].dest) is not None:
                text = getattr(args, item.flags[0].dest)
                values[item.field] = _parse(item, text, f"argument {item.flags[0].spelling}")
        except ValueError as exc:
            parser.error(str(exc))
    if engine:
        values["engine_configs"] = engine_configs
    return config_class(**values)


def _parse(item: Setting, text: str, where: str) -> Any:
    try:
        return item.parse(text)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _engine_configs(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"{ENGINE_CONFIG_FLAG} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


# -- properties files ------------------------------------------------------------------------


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java properties file as Kafka's server.properties is written: `name=value` (or
    `name: value`) per line, `#` and `!` start comments. A Kubernetes ConfigMap mounts
    one per service."""
    out: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        name, sep, value = line.partition("=") if "=" in line else line.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"{path}:{number}: expected name=value, got {raw!r}")
        out[name.strip()] = value.strip()
    return out


def _key(name: str) -> str:
    """Names compared as flags are: `a.b_c`, `a-b-c` and `--a-b-c` are one name."""
    return name.removeprefix("--").replace(".", "-").replace("_", "-")


def _file_names(declared: list[Setting]) -> dict[str, tuple[Setting, Flag | None]]:
    """What a properties file may call each setting: every flag's spelling, and the
    setting's own name when it has one flag (or is an engine setting, flag None)."""
    out: dict[str, tuple[Setting, Flag | None]] = {}
    for item in declared:
        for flag in item.flags:
            out[_key(flag.spelling)] = (item, flag)
        if item.engine_config:
            out[_key(item.name)] = (item, None)
        elif len(item.flags) == 1:
            out.setdefault(_key(item.name), (item, item.flags[0]))
    return out


def config_file_args(
    argv: list[str] | None,
    parser: argparse.ArgumentParser,
    declared: list[Setting],
    *,
    engine: bool = False,
) -> list[str]:
    """The settings of SEGLOG_CONFIG_FILE (or `--config-file PATH` in argv) as flags placed
    before argv, so that flags given on the command line win. A name no setting has is the
    node's engine setting (`--config name=value`), or an error, never silently ignored."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = os.environ.get(CONFIG_FILE_ENV)
    if "--config-file" in args:
        at = args.index("--config-file")
        if at + 1 >= len(args):
            raise SystemExit("--config-file needs a path")
        path = args[at + 1]
        del args[at : at + 2]
    if not path:
        return args
    names = _file_names(declared)
    out = []
    for name, value in read_properties(path).items():
        item, flag = names.get(_key(name), (None, None))
        if flag is not None:
            out += [flag.spelling, value]
        elif item is not None:
            out += [ENGINE_CONFIG_FLAG, f"{item.name}={value}"]
        elif engine:
            out += [ENGINE_CONFIG_FLAG, f"{name}={value}"]
        else:
            parser.error(f"{path}: {name} is not a setting of this service")
    return out + args


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
    shown = _shown_default(item.default)
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


def readme_tables() -> Mapping[str, str]:
    """Each service's table, under the title the README gives it."""
    from services.gateway.settings import GatewayConfig
    from services.storage_node.settings import NodeConfig

    return {"gateway": markdown_table(GatewayConfig), "storage node": markdown_table(NodeConfig)}


if __name__ == "__main__":
    for title, table in readme_tables().items():
        print(f"<!-- {title} settings: python -m services.settings -->\nThe {title}:\n\n{table}")
