"""Idle replication's cost: a leader and a follower node (separate processes, no gateway)
hosting SEGLOG_BENCH_IDLE_PARTITIONS partitions (default 3000) with replication factor 2,
all led by the first and followed by the second, nothing written; the CPU seconds each
process spends per 10 s once the follower is in step. Run on the bulk path (the nodes share a
cluster secret) and on the gRPC path (they do not).

    python -m bench.idle_replication
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

PARTITIONS = int(os.environ.get("SEGLOG_BENCH_IDLE_PARTITIONS", 3000))
MEASURE_S = 10.0
SECRET = b"idle-replication-bench-secret-0123"
LEADER, FOLLOWER = 1, 2


def _node(node_id: int, data_dir: str, secret: bytes | None, conn: Connection) -> None:
    """One node: host every partition under the same registration, then report the CPU
    seconds spent over the measured window when asked."""
    from services.storage_node.partition import Registration
    from services.storage_node.server import StorageNode
    from services.storage_node.settings import NodeConfig

    node = StorageNode(
        NodeConfig(
            node_id=node_id,
            data_dir=Path(data_dir),
            cluster_secret=secret,
        )
    )
    node.start()
    conn.send((node.address, node.bulk_address))
    leader_address, leader_bulk_address = conn.recv()
    node.replicas.node_addresses[LEADER] = leader_address
    node.replicas.node_bulk_addresses[LEADER] = leader_bulk_address
    registration = Registration(LEADER, 0, 0, (LEADER, FOLLOWER), (LEADER, FOLLOWER))
    for partition in range(PARTITIONS):
        node.replicas.apply_state("idle", partition, {}, registration)
    conn.send("hosting")
    while (command := conn.recv()) != "stop":
        if command == "in step":
            conn.send(
                all(
                    node.replicas.partition("idle", p).log.high_watermark == 0
                    for p in range(PARTITIONS)
                )
            )
        elif command == "measure":
            started = time.process_time()
            time.sleep(MEASURE_S)  # the window measured: nothing else to do but wait
            conn.send(time.process_time() - started)
    node.stop(grace_s=0, controlled=False)
    conn.send("stopped")


def measure(secret: bytes | None) -> tuple[float, float]:
    """(leader, follower) CPU seconds per MEASURE_S while idle."""
    began = time.monotonic()
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="seglog-idle-") as root:
        pipes = {}
        processes = []
        for node_id in (LEADER, FOLLOWER):
            parent, child = context.Pipe()
            process = context.Process(
                target=_node, args=(node_id, f"{root}/node-{node_id}", secret, child)
            )
            process.start()
            pipes[node_id] = parent
            processes.append(process)
        addresses = {node_id: pipe.recv() for node_id, pipe in pipes.items()}
        for pipe in pipes.values():
            pipe.send(addresses[LEADER])
        for pipe in pipes.values():
            assert pipe.recv() == "hosting"
        print(f"  (hosting after {time.monotonic() - began:.1f} s)", flush=True)
        # The follower's first fetch moves every high watermark to 0 on both sides.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for pipe in pipes.values():
                pipe.send("in step")
            if all(pipe.recv() for pipe in pipes.values()):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("the follower did not get in step")
        print(f"  (in step after {time.monotonic() - began:.1f} s)", flush=True)
        time.sleep(2.0)  # let the last answers and ISR checks settle before measuring
        for pipe in pipes.values():
            pipe.send("measure")
        cpu = {node_id: pipe.recv() for node_id, pipe in pipes.items()}
        for pipe in pipes.values():
            pipe.send("stop")
            pipe.recv()
        print(f"  (stopped after {time.monotonic() - began:.1f} s)", flush=True)
        for process in processes:
            process.join(timeout=30)
        return cpu[LEADER], cpu[FOLLOWER]


def main() -> None:
    print(f"idle replication, {PARTITIONS} partitions followed, CPU seconds per {MEASURE_S:.0f} s")
    for path, secret in (("bulk", SECRET), ("grpc", None)):
        leader, follower = measure(secret)
        print(f"  {path:5s} leader {leader:6.2f} s   follower {follower:6.2f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
