"""A service's command line, derived from its declared settings (settings.py): each flag with
its environment variable (`--session-timeout-ms` reads SEGLOG_SESSION_TIMEOUT_MS when the
flag is not given), and properties files (`--config-file PATH` or SEGLOG_CONFIG_FILE, as
Kafka's server.properties) in which a line names a setting by its Kafka name or by a flag's
spelling with dots (`session.timeout.ms`, as files were written before); a flag given on
the command line wins over the file, the file over the environment."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, TypeVar, cast

from services.settings import ENGINE_CONFIG_FLAG, Flag, Setting, settings_of, shown_default

_T = TypeVar("_T")

CONFIG_FILE_ENV = "SEGLOG_CONFIG_FILE"


def environment_variables(config_class: type) -> set[str]:
    """Every variable the service's flags read (the config file's too)."""
    return {f.env for s in settings_of(config_class) for f in s.flags} | {CONFIG_FILE_ENV}


def _add_flags(parser: argparse.ArgumentParser, declared: Setting) -> None:
    for flag in declared.flags:
        shown = ""
        if not declared.composite and declared.default not in (None, dataclasses.MISSING):
            shown = f"; default {shown_default(declared.default)}"
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
    names = ", ".join(f"{s.name}={shown_default(s.default)}" for s in settings if s.engine_config)
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
