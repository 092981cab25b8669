"""Run a storage node: python -m services.storage_node --node-id N --data-dir DIR ... (--help:
every setting, as declared in settings.py)."""

from __future__ import annotations

import sys

from services import serving
from services.command_line import parse_command_line

from .server import StorageNode
from .settings import NodeConfig


def parse_args(argv: list[str] | None = None) -> NodeConfig:
    return parse_command_line(NodeConfig, "python -m services.storage_node", argv)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return serving.run_until_signalled(
        f"storage node {config.node_id}",
        f"seglog-storage-node-{config.node_id}",
        lambda tracer, meter: StorageNode(config, tracer_provider=tracer, meter_provider=meter),
    )


if __name__ == "__main__":
    sys.exit(main())
