"""make image-smoke: the built image run for real. One gateway and three storage nodes as
containers (podman, host network on loopback ports, read-only root file systems, a volume
each), a topic with three replicas created, records produced and consumed from the host
through the gateway's port, a node container killed (SIGKILL) and started again on its
volume, every record still there and the node back in sync; then everything removed.

    python -m tests.container_smoke [--image localhost/seglog:dev]
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from seglog.client.admin import Admin
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "deploy/container/containers.conf"
DATA = "/var/lib/seglog/data"
SECRET = "smoke-cluster-secret-" + secrets.token_hex(8)
RECORDS = 1000


def _podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    env = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONF))}
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _wait(predicate, what: str, timeout_s: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return
        except Exception:  # not up yet
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _run(name: str, volume: str, image: str, command: list[str]) -> None:
    _podman(
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "--volume",
        f"{volume}:{DATA}",
        "--env",
        f"SEGLOG_CLUSTER_SECRET={SECRET}",
        image,
        *command,
    )


def _live_nodes(admin: Admin) -> set[int]:
    return {n.node_id for n in admin.describe_cluster().nodes if n.live}


def _in_sync(admin: Admin, topic: str) -> bool:
    (described,) = admin.describe_topics([topic])
    return all(len(p.isr) == 3 for p in described.partitions)


def _consume_all(bootstrap: str, topic: str, expected: int, partitions: int = 3) -> list[bytes]:
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(out) < expected and time.monotonic() < deadline:
            out += [r.value for r in consumer.poll_records(timeout_ms=500)]
        return out


def smoke(image: str) -> None:
    run_id = secrets.token_hex(4)
    gateway_port, internal_port, *node_ports = free_ports(8)
    bootstrap = f"127.0.0.1:{gateway_port}"
    internal = f"127.0.0.1:{internal_port}"  # where the nodes call the gateway
    names = [f"seglog-smoke-{run_id}-gateway"] + [
        f"seglog-smoke-{run_id}-node-{i}" for i in (1, 2, 3)
    ]
    volumes = [f"{name}-data" for name in names]
    try:
        for volume in volumes:
            _podman("volume", "create", volume)
        _run(
            names[0],
            volumes[0],
            image,
            ["seglog-gateway", "--listen", bootstrap, "--internal-listen", internal]
            + ["--data-dir", DATA],
        )
        for i in (1, 2, 3):
            api, bulk = node_ports[2 * (i - 1)], node_ports[2 * (i - 1) + 1]
            _run(
                names[i],
                volumes[i],
                image,
                [
                    "seglog-storage-node",
                    "--node-id",
                    str(i),
                    "--listen",
                    f"127.0.0.1:{api}",
                    "--bulk-listen",
                    f"127.0.0.1:{bulk}",
                    "--gateway",
                    internal,
                    "--data-dir",
                    DATA,
                ],
            )
        with Admin(bootstrap) as admin:
            _wait(lambda: _live_nodes(admin) == {1, 2, 3}, "three live nodes")
            admin.create_topic("smoke", 3, 3)
            _wait(lambda: _in_sync(admin, "smoke"), "the topic's replicas")
            first = [b"before-%d" % i for i in range(RECORDS)]
            with Producer(bootstrap, acks="all") as producer:
                for f in [producer.send("smoke", v) for v in first]:
                    f.get(timeout=30)
            got = _consume_all(bootstrap, "smoke", RECORDS)
            assert sorted(got) == sorted(first), f"read {len(got)} of {RECORDS}"
            print(f"produced and consumed {RECORDS} records through the containers")

            _podman("kill", "--signal", "KILL", names[2])
            _wait(lambda: 2 not in _live_nodes(admin), "node 2's death noticed")
            _podman("start", names[2])
            _wait(lambda: _live_nodes(admin) == {1, 2, 3}, "node 2 back")
            second = [b"after-%d" % i for i in range(RECORDS)]
            with Producer(bootstrap, acks="all") as producer:
                for f in [producer.send("smoke", v) for v in second]:
                    f.get(timeout=30)
            _wait(lambda: _in_sync(admin, "smoke"), "node 2 in sync again")
            got = _consume_all(bootstrap, "smoke", 2 * RECORDS)
            assert sorted(got) == sorted(first + second), f"read {len(got)} of {2 * RECORDS}"
            print("node 2 killed and restarted on its volume: every record intact, in sync")
    finally:
        for name in reversed(names):
            _podman("rm", "--force", "--time", "5", name, check=False)
        for volume in volumes:
            _podman("volume", "rm", "--force", volume, check=False)


def smoke_main(prog: str, run: Callable[[str], None], argv: list[str] | None = None) -> int:
    """A smoke test's command line: --image, then `run(image)`, timed."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--image", default=os.environ.get("IMAGE", "localhost/seglog:dev"))
    args = parser.parse_args(argv)
    started = time.monotonic()
    run(args.image)
    print(
        f"{prog.rsplit('.', 1)[-1].replace('_', ' ')} test passed in "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return smoke_main("python -m tests.container_smoke", smoke, argv)


if __name__ == "__main__":
    sys.exit(main())
