"""The two clusters `make conformance` runs franz-go's tests against, each started here and
stopped by its own pids: seglog as `make run` starts it (devtools.local_cluster: a gateway
with its Kafka listener and three storage nodes, in a data dir of its own), and Apache Kafka
as devtools/apache_kafka.py starts it (three KRaft brokers, so both sides place three
replicas)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.ports import free_ports

from .apache_kafka import KafkaBrokers
from .processes import children

ROOT = Path(__file__).resolve().parent.parent
# Three Python processes and a gateway registering on two busy cores (measured: 10-40 s).
SEGLOG_READY_TIMEOUT_S = 180.0
# Controlled shutdown moves each node's leaderships away first (up to 30 s a node).
SEGLOG_STOP_GRACE_S = 120.0
READY_BANNER = "seglog local cluster: gateway on"
# local_cluster's ports beside its gateway's: nodes on +1..+3, the internal listener on +20.
SEGLOG_PORT_OFFSETS = (0, 1, 2, 3, 20)
PORT_ATTEMPTS = 50


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def seglog_ports() -> tuple[int, int]:
    """A gateway port whose neighbours local_cluster takes are free too, and a Kafka port."""
    for _ in range(PORT_ATTEMPTS):
        gateway, kafka = free_ports(2)
        taken = {gateway + offset for offset in SEGLOG_PORT_OFFSETS}
        if kafka not in taken and all(_free(port) for port in taken):
            return gateway, kafka
    raise RuntimeError(f"no free gateway port with its neighbours in {PORT_ATTEMPTS} tries")


@contextlib.contextmanager
def seglog_cluster(root: Path, nodes: int = 3) -> Iterator[str]:
    """`make run`'s cluster in root/data on free ports; yields its Kafka bootstrap address."""
    gateway_port, kafka_port = seglog_ports()
    root.mkdir(parents=True, exist_ok=True)
    banner = root / "local_cluster.out"
    env = {
        key: value for key, value in os.environ.items() if key != "OTEL_METRICS_EXPORTER"
    }  # no Prometheus ports to collide with another run's
    with open(banner, "wb") as out, open(root / "local_cluster.err", "wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "devtools.local_cluster",
                "--data-dir",
                str(root / "data"),
                "--listen",
                f"127.0.0.1:{gateway_port}",
                "--kafka-listen",
                f"127.0.0.1:{kafka_port}",
                "--nodes",
                str(nodes),
            ],  # fmt: skip
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + SEGLOG_READY_TIMEOUT_S
        while READY_BANNER not in banner.read_text(errors="replace"):
            if process.poll() is not None:
                raise RuntimeError(
                    f"seglog's local cluster exited ({process.returncode}): "
                    f"{(root / 'local_cluster.err').read_text(errors='replace')[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"seglog not ready in {SEGLOG_READY_TIMEOUT_S:.0f} s: {root}")
            time.sleep(0.2)
        yield f"127.0.0.1:{kafka_port}"
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to local_cluster (it stops its nodes, then its gateway); past the grace, SIGKILL
    to its process group, its own session's, and to each server's: local_cluster starts its
    nodes and gateway in process groups of their own (a terminal's Ctrl-C reaches it alone)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    servers: list[int] = []
    try:
        process.wait(SEGLOG_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        servers = children(process.pid)
    for group in [process.pid, *servers]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def kafka_cluster(root: Path, brokers: int = 3) -> Iterator[str]:
    """Apache Kafka's brokers in root; yields their bootstrap list."""
    with KafkaBrokers(root, brokers=brokers) as kafka:
        yield kafka.bootstrap
