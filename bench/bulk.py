"""The bulk fetch path's benchmarks (a gateway and one storage node, separate processes on
loopback, the cluster secret set), each beside a baseline measured in the same run:

- a Consumer (Kafka's default fetch sizes) reading SEGLOG_BENCH_BULK_MIB (default 1024) MiB
  of SEGLOG_BENCH_BULK_RECORD_BYTES (default 256 KiB) records, one per batch, through the
  bulk path, against a bare os.sendfile of the same segment files over loopback TCP to a
  recv_into loop (bench/sendfile_server.py). Records are decoded as any poll decodes them;
  with small records that work, not the transfer, sets the pace (16 KiB: ~0.7x);
- the storage node's CPU seconds per GiB served on the bulk path, against the same on the
  gRPC stream path through the gateway (the consumer with fetch_transport=grpc), read from
  /proc/<pid>/stat around each read; the gRPC consumer's rate is printed beside it.
Both with Kafka's default max.partition.fetch.bytes (1 MiB) and with 8 MiB.
- issue 58's figure: the same Consumer reading a quarter as many MiB of 10 KiB records (a
  topic of its own) through the bulk path, against bare sendfile of its segment files
  (target 0.5x: per-record decoding, not the transfer, is what that size adds).
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.client.admin import Admin
from seglog.client.consumer import Consumer
from seglog.client.gateway import GatewayClient
from seglog.client.structs import TopicPartition
from seglog.rpc.channels import open_channel
from seglog.v1 import common_pb2
from services import serving

from .cluster import CLUSTER_SECRET_ENV
from .services import _request_of_batches

MIB = 1024 * 1024
BULK_MIB = int(os.environ.get("SEGLOG_BENCH_BULK_MIB", 1024))
TOPIC = "bulk"
BATCH_BYTES = int(os.environ.get("SEGLOG_BENCH_BULK_RECORD_BYTES", 256 * 1024))
SMALL_TOPIC = "bulk-small"
SMALL_RECORD_BYTES = 10 * 1024
SMALL_MIB = max(1, BULK_MIB // 4)


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of the process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def _consume(
    address: str,
    transport: str,
    end_offset: int,
    partition_fetch_bytes: int = MIB,
    topic: str = TOPIC,
) -> float:
    with Consumer(
        address,
        auto_offset_reset="earliest",
        fetch_transport=transport,
        check_crcs=False,  # what is measured is the transfer, not the CRC
        max_partition_fetch_bytes=partition_fetch_bytes,
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        start = time.perf_counter()
        seen = 0
        while seen < end_offset:
            seen += len(consumer.poll_records(timeout_ms=1000, max_records=100_000))
        return time.perf_counter() - start


def _bare_sendfile(address: str, total: int) -> float:
    host, port = address.rsplit(":", 1)
    buffer = bytearray(4 * MIB)
    view = memoryview(buffer)
    start = time.perf_counter()
    with socket.create_connection((host, int(port))) as sock:
        got = 0
        while True:
            n = sock.recv_into(view)
            if not n:
                break
            got += n
    assert got == total, (got, total)
    return time.perf_counter() - start


def _fill(gateway_address: str, topic: str, record_bytes: int, mib: int) -> int:
    """`mib` MiB of `record_bytes` records, one per batch, in produce requests of 1 MiB;
    returns the partition's end offset."""
    payload = _request_of_batches(topic, record_bytes, max(1, MIB // record_bytes))
    channel = open_channel(gateway_address)
    produce = channel.unary_unary(
        "/seglog.v1.Gateway/Produce",
        request_serializer=lambda b: b,
        response_deserializer=common_pb2.ProduceResponse.FromString,
    )
    for _ in range(mib):
        produce(payload, timeout=60)
    channel.close()
    client = GatewayClient(gateway_address)
    try:
        return client.list_offsets(topic, {0: -1})[0].offset
    finally:
        client.close()


def _segment_files(root: Path, topic: str) -> list[str]:
    return sorted(str(p) for p in (root / "node-1" / f"{topic}-0").glob("*.log"))


def _small_records(  # type: ignore[no-untyped-def]
    report, address: str, root: Path, processes: list[ServerProcess]
) -> None:
    """Issue 58's figure: 10 KiB records through the bulk path (Kafka's default 1 MiB
    partition fetches) against bare sendfile of the same files, the two taking turns."""
    end = _fill(address, SMALL_TOPIC, SMALL_RECORD_BYTES, SMALL_MIB)
    files = _segment_files(root, SMALL_TOPIC)
    total = sum(os.path.getsize(f) for f in files)
    bare = ServerProcess("sendfile", "bench.sendfile_server", files)
    processes.append(bare)
    bare.start()
    times: dict[str, list[float]] = {"bulk": [], "bare": []}
    for _ in range(3):
        times["bulk"].append(_consume(address, "bulk", end, MIB, SMALL_TOPIC))
        times["bare"].append(_bare_sendfile(bare.address, total))
    mb = total / MIB
    report(
        f"consumer via bulk path, {SMALL_RECORD_BYTES // 1024} KiB records, {mb:.0f} MiB (MB/s)",
        mb / min(times["bulk"]),
        mb / min(times["bare"]),
        "MB/s",
        0.5,
    )


def run(report) -> None:  # type: ignore[no-untyped-def]
    serving.keep_freed_buffers_for_reuse()
    env = CLUSTER_SECRET_ENV
    with tempfile.TemporaryDirectory(prefix="seglog-bench-bulk-") as tmp:
        root = Path(tmp)
        gateway = gateway_process("127.0.0.1:0", root / "gateway", env=env)
        processes: list[ServerProcess] = [gateway]
        try:
            gateway.start()
            node = node_process(
                1, "127.0.0.1:0", root / "node-1", gateway.internal_address, env=env
            )
            processes.append(node)
            node.start()
            admin = Admin(gateway.address)
            deadline = time.monotonic() + 30
            while not [n for n in admin.describe_cluster().nodes if n.live]:
                if time.monotonic() > deadline:
                    raise RuntimeError("the storage node never registered")
                time.sleep(0.05)
            admin.create_topic(TOPIC, 1, 1)
            admin.create_topic(SMALL_TOPIC, 1, 1)
            admin.close()
            end = _fill(gateway.address, TOPIC, BATCH_BYTES, BULK_MIB)
            files = _segment_files(root, TOPIC)
            total = sum(os.path.getsize(f) for f in files)
            bare = ServerProcess("sendfile", "bench.sendfile_server", files)
            processes.append(bare)
            bare.start()
            mb = total / MIB
            gib = total / (1024 * MIB)
            # Kafka's default max.partition.fetch.bytes (1 MiB: a round trip per MiB of one
            # partition), and 8 MiB, as a consumer tuned for bulk reads would set it.
            for label, fetch_bytes in (("1 MiB fetches", MIB), ("8 MiB fetches", 8 * MIB)):
                times: dict[str, list[float]] = {"bulk": [], "grpc": [], "bare": []}
                cpu: dict[str, list[tuple[float, float]]] = {"bulk": [], "grpc": []}
                for _ in range(3):
                    for transport in ("bulk", "grpc"):
                        user, system = _cpu_seconds(node.pid)
                        times[transport].append(
                            _consume(gateway.address, transport, end, fetch_bytes)
                        )
                        after = _cpu_seconds(node.pid)
                        cpu[transport].append((after[0] - user, after[1] - system))
                    times["bare"].append(_bare_sendfile(bare.address, total))
                report(
                    f"consumer via bulk path, {mb:.0f} MiB, {label} (MB/s)",
                    mb / min(times["bulk"]),
                    mb / min(times["bare"]),
                    "MB/s",
                    0.8,
                )
                report(
                    f"consumer via gateway gRPC, {label} (MB/s)",
                    mb / min(times["grpc"]),
                    mb / min(times["bare"]),
                    "MB/s",
                    None,
                )
                # Lower is better: the gRPC path's CPU is the baseline, the target a ceiling.
                # sendfile's own kernel copy counts here (system time), user copies are gone.
                bulk_user, bulk_sys = min(cpu["bulk"], key=sum)
                grpc_cpu = sum(min(cpu["grpc"], key=sum)) / gib
                bulk_cpu = (bulk_user + bulk_sys) / gib
                ratio = bulk_cpu / grpc_cpu
                print(
                    f"{'node CPU per GiB, bulk vs gRPC, ' + label + ' (s/GiB)':48s} "
                    f"{bulk_cpu:10.3f} s/GiB    baseline {grpc_cpu:10.3f} s/GiB    "
                    f"ratio {ratio:5.2f}x{'  ok' if ratio <= 0.3 else '  ABOVE 0.3x'}"
                    f"  (bulk: user {bulk_user / gib:.3f}, system {bulk_sys / gib:.3f})"
                )
            _small_records(report, gateway.address, root, processes)
        finally:
            for process in reversed(processes):
                process.stop()
