"""python -m services.gateway --listen HOST:PORT --data-dir DIR (--help: every setting, as
declared in settings.py)"""

from __future__ import annotations

import sys

from services import serving
from services.command_line import parse_command_line

from .server import Gateway
from .settings import GatewayConfig


def parse_args(argv: list[str] | None = None) -> GatewayConfig:
    return parse_command_line(GatewayConfig, "python -m services.gateway", argv)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return serving.run_until_signalled(
        "gateway",
        "seglog-gateway",
        lambda tracer, meter: Gateway(config, tracer_provider=tracer, meter_provider=meter),
    )


if __name__ == "__main__":
    sys.exit(main())
