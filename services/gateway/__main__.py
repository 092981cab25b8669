"""python -m services.gateway --listen HOST:PORT --data-dir DIR"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from services import serving

from .server import Gateway, GatewayConfig


def parse_args(argv: list[str] | None = None) -> GatewayConfig:
    parser = argparse.ArgumentParser(prog="python -m services.gateway")
    serving.env_flag(
        parser, "--listen", "SEGLOG_LISTEN", "address to serve on", default="127.0.0.1:7070"
    )
    serving.env_flag(
        parser, "--data-dir", "SEGLOG_DATA_DIR", "where the registry lives", default="data/gateway"
    )
    serving.env_flag(
        parser,
        "--session-timeout-ms",
        "SEGLOG_SESSION_TIMEOUT_MS",
        "a node without a heartbeat for this long is down",
        type=int,
        default=9000,
    )
    serving.env_flag(
        parser,
        "--heartbeat-interval-ms",
        "SEGLOG_HEARTBEAT_INTERVAL_MS",
        "the heartbeat period asked of nodes",
        type=int,
        default=2000,
    )
    args = parser.parse_args(argv)
    return GatewayConfig(
        listen=args.listen,
        data_dir=Path(args.data_dir),
        session_timeout_ms=int(args.session_timeout_ms),
        heartbeat_interval_ms=int(args.heartbeat_interval_ms),
    )


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    return serving.run_until_signalled(
        "gateway", "seglog-gateway", lambda provider: Gateway(config, tracer_provider=provider)
    )


if __name__ == "__main__":
    sys.exit(main())
