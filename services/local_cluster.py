"""`make run`: a gateway and storage nodes on loopback, as separate processes.

    python -m services.local_cluster [--data-dir data] [--listen 127.0.0.1:7070] [--nodes 3]

Data lives under the data dir (`gateway/`, `node-1/`, ...) and is kept between runs. Nodes
listen on the ports after the gateway's (7071, 7072, 7073), or on free ports when the gateway
port is 0. Ctrl-C or SIGTERM stops everything: nodes first, each flushing and writing its
clean-shutdown marker, then the gateway.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from .processes import ServerProcess, gateway_process, node_process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.local_cluster")
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--listen", default="127.0.0.1:7070", help="the gateway's address")
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args(argv)

    data = Path(args.data_dir)
    (data / "logs").mkdir(parents=True, exist_ok=True)
    host, port = args.listen.rsplit(":", 1)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    gateway = gateway_process(
        args.listen, data / "gateway", stderr_path=data / "logs" / "gateway.log"
    )
    nodes: list[ServerProcess] = []
    try:
        address = gateway.start()
        for node_id in range(1, args.nodes + 1):
            node_port = 0 if int(port) == 0 else int(port) + node_id
            node = node_process(
                node_id,
                f"{host}:{node_port}",
                data / f"node-{node_id}",
                address,
                stderr_path=data / "logs" / f"node-{node_id}.log",
            )
            nodes.append(node)
            node.start()
        print(f"seglog local cluster: gateway on {address}", flush=True)
        for node in nodes:
            print(f"  storage {node.name} on {node.address} (pid {node.pid})", flush=True)
        print(f"  data in {data}/, logs in {data / 'logs'}/; Ctrl-C stops", flush=True)
        while not stop.wait(0.5):
            for process in [gateway, *nodes]:
                if not process.alive():
                    print(f"{process.name} exited; stopping the cluster", file=sys.stderr)
                    stop.set()
    except RuntimeError as exc:
        print(f"seglog local cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        for node in nodes:
            node.stop()
        gateway.stop()
        print("seglog local cluster stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
