"""Issue 31's long-poll attack at full scale: produce latency while 200 clients loop long
polls of 500 partitions each through the gateway, never backing off, beside the same
produce with no poll running (same run, same cluster).

The attackers run in ATTACKER_PROCESSES processes of their own, as outside clients would, so
the producer measured here does not share their interpreter. Each produce goes through the
gateway; the same append sent straight to the node tells whether a delay is the gateway's
or the node's. A scaled-down form (60 x 100) is in `make test`:
tests/integration/test_long_polls_and_produce.py.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from seglog.client.gateway import GatewayClient
from seglog.v1 import common_pb2, gateway_pb2_grpc, storage_pb2_grpc
from services import serving
from tests.batches import make_batch
from tests.waiting import wait_until

POLLERS = int(os.environ.get("SEGLOG_BENCH_POLLERS", 200))
PARTITIONS = int(os.environ.get("SEGLOG_BENCH_POLL_PARTITIONS", 500))
ATTACK_S = float(os.environ.get("SEGLOG_BENCH_ATTACK_S", 20))
ATTACKER_PROCESSES = 4
BASELINE_PRODUCES = 50
# Polls start, are refused and spread out before produce is measured.
SETTLE_S = 5.0


def _attack(address: str, pollers: int, stop: Any, counts: Any) -> None:
    """`pollers` threads, each on its own connection, long-polling every partition of the
    empty topic `deep` again as soon as each answer or refusal comes."""
    request = common_pb2.FetchRequest(min_bytes=1 << 20, max_wait_ms=500, max_bytes=1 << 20)
    for p in range(PARTITIONS):
        request.partitions.add(
            topic="deep", partition=p, fetch_offset=0, partition_max_bytes=1 << 20
        )

    def loop() -> None:
        with grpc.insecure_channel(address) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            while not stop.is_set():
                outcome = 0
                try:
                    for _ in stub.Fetch(request, timeout=30):
                        pass
                except grpc.RpcError as exc:
                    outcome = 1 if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else 2
                with counts.get_lock():
                    counts[outcome] += 1

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(pollers)]
    for thread in threads:
        thread.start()
    stop.wait()
    for thread in threads:
        thread.join(timeout=30)


def _latencies_ms(
    call: Callable[[int], None], *, count: int = 0, seconds: float = 0
) -> list[float]:
    took = []
    deadline = time.monotonic() + seconds
    i = 0
    while (count and i < count) or (seconds and time.monotonic() < deadline):
        started = time.monotonic()
        call(i)
        took.append((time.monotonic() - started) * 1000)
        i += 1
    return sorted(took)


def _p50(took: list[float]) -> float:
    return took[len(took) // 2]


def run(report) -> None:  # type: ignore[no-untyped-def]
    serving.keep_freed_buffers_for_reuse()
    with tempfile.TemporaryDirectory(prefix="seglog-bench-long-polls-") as tmp:
        root = Path(tmp)
        processes: list[ServerProcess] = []
        try:
            gateway = gateway_process("127.0.0.1:0", root / "gateway")
            processes.append(gateway)
            gateway.start()
            node = node_process(1, "127.0.0.1:0", root / "node-1", gateway.internal_address)
            processes.append(node)
            node.start()
            _measure(gateway.address, node.address, report)
        finally:
            for process in reversed(processes):
                process.stop()


def _measure(gateway_address: str, node_address: str, report) -> None:  # type: ignore[no-untyped-def]
    admin = Admin(gateway_address)
    client = GatewayClient(gateway_address)
    node_channel = grpc.insecure_channel(node_address)
    try:
        assert wait_until(lambda: any(n.live for n in admin.describe_cluster().nodes))
        admin.create_topic("deep", PARTITIONS, 1)
        admin.create_topic("writes", 1, 1)
        node = storage_pb2_grpc.StorageNodeStub(node_channel)
        batch = make_batch([b"w" * 100])
        append = common_pb2.ProduceRequest(topic="writes", acks=1)
        append.partitions.add(partition=0, records=batch)

        def via_gateway(_: int) -> None:
            [answer] = client.produce("writes", {0: batch}, timeout_ms=120_000)
            assert answer.error == 0, answer.error_message

        def to_node(_: int) -> None:
            assert node.Append(append, timeout=120).partitions[0].error == 0

        quiet = _latencies_ms(via_gateway, count=BASELINE_PRODUCES)
        quiet_node = _latencies_ms(to_node, count=BASELINE_PRODUCES)
        stop = multiprocessing.Event()
        counts = multiprocessing.Array("l", 3)
        attackers = [
            multiprocessing.Process(
                target=_attack,
                args=(gateway_address, POLLERS // ATTACKER_PROCESSES, stop, counts),
            )
            for _ in range(ATTACKER_PROCESSES)
        ]
        for attacker in attackers:
            attacker.start()
        try:
            time.sleep(SETTLE_S)  # a warm-up, not a wait for a condition: excluded
            attacked = _latencies_ms(via_gateway, seconds=ATTACK_S / 2)
            attacked_node = _latencies_ms(to_node, seconds=ATTACK_S / 2)
        finally:
            stop.set()
            for attacker in attackers:
                attacker.join(timeout=60)
                if attacker.is_alive():
                    attacker.kill()
        attack = f"{POLLERS} long polls x {PARTITIONS} partitions"
        report(f"produce p50 under {attack} (ms)", _p50(attacked), _p50(quiet), "ms", None)
        report(f"produce max under {attack} (ms)", attacked[-1], quiet[-1], "ms", None)
        report(
            f"append to the node p50 under {attack} (ms)",
            _p50(attacked_node),
            _p50(quiet_node),
            "ms",
            None,
        )
        answered, refused, failed = counts[:]
        print(
            f"  polls answered {answered}, refused SERVER_BUSY {refused}, failed otherwise "
            f"{failed}; produces measured {len(attacked)}"
        )
    finally:
        node_channel.close()
        client.close()
        admin.close()
