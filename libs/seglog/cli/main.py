"""Entry point of the `seglog` console script."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import sys
from typing import cast

from ..client.gateway import default_bootstrap, trace_client_calls
from ..errors import NodeUnavailableError, SeglogError
from ..tracing import configure_tracing
from . import (
    acls,
    configs,
    consume,
    groups,
    perf,
    produce,
    reassign,
    records,
    share,
    topics,
    transactions,
    unreachable,
)
from .dump import main_dump

BOOTSTRAP_HELP = (
    "the gateway's address, host[:port] (env SEGLOG_BOOTSTRAP; default 127.0.0.1:7070, "
    "port 7070 when none is given); --bootstrap-server as in Kafka's tools"
)


class _Parser(argparse.ArgumentParser):
    """argparse leaves a subcommand's unknown flags to the top-level parser, which prints
    its own usage; here the subcommand that got them reports them, with its usage."""

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        is_leaf_subcommand = self._subparsers is None and self.prog != "seglog"
        if extras and is_leaf_subcommand:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="seglog", description="seglog command-line tools")
    parser.add_argument("--version", action="version", version=f"seglog {_version()}")
    # Accepted before the subcommand here and after it (`common`); a value given after it
    # wins, and none given anywhere means the default.
    parser.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=default_bootstrap(),
        help=BOOTSTRAP_HELP,
    )
    # Every subcommand's parser is a _Parser too (argparse makes them of the parent's class).
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True),
    )
    dump = sub.add_parser("dump", help="print the batches of .log files and index entries")
    dump.add_argument("files", nargs="*", help=".log, .index or .timeindex files")
    dump.add_argument("--topic", help="dump this topic's files found under --data-dir")
    dump.add_argument("--partition", type=int, help="with --topic: only this partition")
    dump.add_argument("--data-dir", default="data", help="a node's or `make run`'s data dir")
    dump.add_argument("--records", action="store_true", help="print every record of each batch")
    dump.add_argument("--verify", action="store_true", help="check index entries against the log")
    dump.add_argument("--json", action="store_true", help="one JSON object per line")
    dump.set_defaults(handler=main_dump)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=argparse.SUPPRESS,
        help=BOOTSTRAP_HELP,
    )
    topics.add_parser(sub, common)
    configs.add_parser(sub, common)
    produce.add_parser(sub, common)
    consume.add_parser(sub, common)
    groups.add_parser(sub, common)
    perf.add_parser(sub, common)
    acls.add_parser(sub, common)
    records.add_parser(sub, common)
    reassign.add_parser(sub, common)
    transactions.add_parser(sub, common)
    share.add_parser(sub, common)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("seglog")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # OTEL_TRACES_EXPORTER=console|otlp traces the CLI's own calls too, joined to the
    # services' spans of the same trace.
    provider = configure_tracing("seglog-cli")
    trace_client_calls(provider)
    # The library's warnings (a producer refused for too few in-sync replicas, a topic created
    # that acks=all can never write to) are the command's to say at once, on stderr.
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    warnings.setFormatter(logging.Formatter("seglog: %(message)s"))
    library = logging.getLogger("seglog")
    library.addHandler(warnings)
    try:
        return int(args.handler(args))
    except SeglogError as exc:
        print(f"seglog: {exc.reason}: {exc}", file=sys.stderr)
        if isinstance(exc, NodeUnavailableError) and hasattr(args, "bootstrap"):
            advice = unreachable.hint(args.bootstrap)
            if advice is not None:
                print(f"seglog: {advice}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"seglog: {exc}", file=sys.stderr)
        return 2
    finally:
        library.removeHandler(warnings)
        if provider is not None:
            provider.shutdown()  # exports the spans still batched
            trace_client_calls(None)


if __name__ == "__main__":
    sys.exit(main())
