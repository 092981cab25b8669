"""Service benchmarks: produce and fetch through the gateway and straight to a storage node,
each beside a bare gRPC call moving the same bytes, measured in the same run.

- produce: 1 MiB requests of 64 x 16 KiB batches, acks=1, one partition on one node,
  against a bare unary call carrying the same 1 MiB payloads (raw-bytes handlers). The bare
  call writes nothing; a plain sequential write of the same bytes to the same file system is
  printed too, as the disk's ceiling, and so is a bare relay: an echo server forwarding each
  payload unchanged to a second one, doing nothing else (the ceiling of any design where a
  gateway relays the request to a storage node over a second gRPC hop; seglog's gateway
  relays over the node's bulk listener instead, as deployed with a cluster secret); and the
  same relay to an echo server that writes each payload to a file (os.write, the page
  cache): the ceiling of such a design for a node that stores the bytes. The CPU time the
  gateway and the node spend per MiB is printed beside the bare relay's and the echo
  server's, summed over every round (/proc/<pid>/stat counts in 10 ms ticks).
- fetch: the same partition read back in fetch streams, against a bare server stream of 1 MiB
  FetchResponse messages written by a raw serializer; both clients parse normal messages.
  The gateway relays the fetch to the node over its bulk listener (with the cluster secret,
  as deployed); the same stream through the bare relay is printed too.

SEGLOG_BENCH_SERVICE_MIB sets how much is produced per side (default 256, in 3 rounds);
SEGLOG_BENCH_SERVICE_FETCH=0 leaves the fetch half out.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from devtools.processes import ServerProcess, gateway_process, node_process
from seglog.records import RecordBatchBuilder
from seglog.rpc import wire
from seglog.rpc.channels import open_channel
from seglog.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from services import serving

from .cluster import CLUSTER_SECRET_ENV
from .scale_probes import cpu_seconds
from .timing import best_in_turns

MIB = 1024 * 1024
SERVICE_MIB = int(os.environ.get("SEGLOG_BENCH_SERVICE_MIB", 256))
ROUNDS = 3
WITH_FETCH = os.environ.get("SEGLOG_BENCH_SERVICE_FETCH", "1") != "0"
FETCH_MAX_BYTES = 32 * MIB


def _request_of_batches(topic: str, batch_bytes: int, batches: int) -> bytes:
    builder = RecordBatchBuilder()
    value = b"v" * (batch_bytes - 61 - 10)
    builder.append(None, value)
    one = builder.build()
    request = common_pb2.ProduceRequest(topic=topic, acks=1, timeout_ms=30_000)
    request.partitions.add(partition=0, records=one * batches)
    return request.SerializeToString()


def _timed(calls: int, fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - start


def _produce(channel: grpc.Channel, method: str, payload: bytes, calls: int) -> float:
    call = channel.unary_unary(
        method,
        request_serializer=wire.identity,
        response_deserializer=common_pb2.ProduceResponse.FromString,
    )

    def once() -> None:
        response = call(payload, timeout=60)
        if response.partitions[0].error:
            raise RuntimeError(response.partitions[0].error_message)

    once()  # warm up the connection
    return _timed(calls, once)


def _fetch(channel: grpc.Channel, method: str, topic: str, end_offset: int) -> tuple[float, int]:
    call = channel.unary_stream(
        method,
        request_serializer=common_pb2.FetchRequest.SerializeToString,
        response_deserializer=common_pb2.FetchResponse.FromString,
    )
    start = time.perf_counter()
    offset, moved = 0, 0
    while offset < end_offset:
        request = common_pb2.FetchRequest(max_wait_ms=0, max_bytes=FETCH_MAX_BYTES)
        request.partitions.add(
            topic=topic, partition=0, fetch_offset=offset, partition_max_bytes=FETCH_MAX_BYTES
        )
        for message in call(request, timeout=60):
            if message.error:
                raise RuntimeError(message.error_message)
            records = message.records
            moved += len(records)
            if records:
                # The next offset: baseOffset + lastOffsetDelta + 1 of the last batch. Batches
                # here are all the same size, so the last one starts at len - size.
                size = int.from_bytes(records[8:12], "big") + 12
                last = len(records) - size
                base = int.from_bytes(records[last : last + 8], "big")
                offset = base + int.from_bytes(records[last + 23 : last + 27], "big") + 1
    return time.perf_counter() - start, moved


def _counting_cpu(
    pids: dict[str, int], spent_s: dict[str, float], fn: Callable[[], float]
) -> Callable[[], float]:
    """`fn`, adding the CPU seconds each named process spent during it to `spent_s`."""

    def run() -> float:
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        elapsed = fn()
        for name, pid in pids.items():
            spent_s[name] = spent_s.get(name, 0.0) + cpu_seconds(pid) - before[name]
        return elapsed

    return run


def _baseline_disk(directory: Path, payload: bytes, calls: int) -> float:
    """The same bytes written sequentially to a file in the same file system: the ceiling
    that any durable produce path shares with this one."""
    path = directory / "disk-baseline"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        return _timed(calls, lambda: os.write(fd, payload))
    finally:
        os.close(fd)
        path.unlink()


def _baseline_put(channel: grpc.Channel, payload: bytes, calls: int) -> float:
    call = channel.unary_unary("/bench.Echo/Put", wire.identity, wire.identity)
    call(payload, timeout=60)
    return _timed(calls, lambda: call(payload, timeout=60))


def _baseline_stream(channel: grpc.Channel, total_bytes: int) -> float:
    call = channel.unary_stream(
        "/bench.Echo/Stream", wire.identity, common_pb2.FetchResponse.FromString
    )
    chunks = total_bytes // MIB
    start = time.perf_counter()
    moved = sum(
        len(m.records)
        for m in call(chunks.to_bytes(8, "big") + MIB.to_bytes(8, "big"), timeout=120)
    )
    assert moved == chunks * MIB
    return time.perf_counter() - start


def run(report) -> None:  # type: ignore[no-untyped-def]
    # This process parses every 1 MiB message of both the baselines and seglog's calls; with
    # glibc's defaults each may land on fresh pages, which made the baselines swing 2x
    # between runs.
    serving.keep_freed_buffers_for_reuse()
    with tempfile.TemporaryDirectory(prefix="seglog-bench-") as tmp:
        root = Path(tmp)
        echo = ServerProcess("echo", "bench.echo_server", [])
        # With the cluster secret, as deployed (make run, the manifests): the gateway relays
        # produce to the node over its bulk listener (bulk.md, version 3).
        gateway = gateway_process("127.0.0.1:0", root / "gateway", env=CLUSTER_SECRET_ENV)
        processes: list[ServerProcess] = [echo, gateway]
        channels: list[grpc.Channel] = []
        try:
            echo.start()
            relay = ServerProcess("relay", "bench.echo_server", ["--relay-to", echo.address])
            processes.append(relay)
            relay.start()
            sink = ServerProcess("sink", "bench.echo_server", ["--write-to", str(root / "sink")])
            processes.append(sink)
            sink.start()
            writing_relay = ServerProcess(
                "writing-relay", "bench.echo_server", ["--relay-to", sink.address]
            )
            processes.append(writing_relay)
            writing_relay.start()
            gateway.start()
            node = node_process(
                1, "127.0.0.1:0", root / "node-1", gateway.internal_address, env=CLUSTER_SECRET_ENV
            )
            processes.append(node)
            node.start()
            admin = open_channel(gateway.address)
            channels.append(admin)
            stub = gateway_pb2_grpc.GatewayStub(admin)  # type: ignore[no-untyped-call]
            deadline = time.monotonic() + 30
            while not stub.DescribeCluster(gateway_pb2.DescribeClusterRequest()).nodes:
                if time.monotonic() > deadline:
                    raise RuntimeError("the storage node never registered")
                time.sleep(0.05)
            for topic in ("via-gateway", "direct"):
                request = gateway_pb2.CreateTopicsRequest()
                request.topics.add(name=topic, num_partitions=1, replication_factor=1)
                stub.CreateTopics(request)
            echo_channel = open_channel(echo.address)
            relay_channel = open_channel(relay.address)
            writing_relay_channel = open_channel(writing_relay.address)
            node_channel = open_channel(node.address)
            channels += [echo_channel, relay_channel, writing_relay_channel, node_channel]

            gateway_payload = _request_of_batches("via-gateway", 16 * 1024, 64)
            direct_payload = _request_of_batches("direct", 16 * 1024, 64)
            calls = max(1, SERVICE_MIB // ROUNDS)
            mb = calls * len(gateway_payload) / MIB
            cpu_s: dict[str, float] = {}
            produce_s = best_in_turns(
                {
                    "base": lambda: _baseline_put(echo_channel, gateway_payload, calls),
                    "via": _counting_cpu(
                        {"gateway": gateway.pid, "node": node.pid},
                        cpu_s,
                        lambda: _produce(
                            admin, "/seglog.v1.Gateway/Produce", gateway_payload, calls
                        ),
                    ),
                    "direct": lambda: _produce(
                        node_channel, "/seglog.v1.StorageNode/Append", direct_payload, calls
                    ),
                    "relay": _counting_cpu(
                        {"relay": relay.pid, "echo": echo.pid},
                        cpu_s,
                        lambda: _baseline_put(relay_channel, gateway_payload, calls),
                    ),
                    "disk": lambda: _baseline_disk(root, gateway_payload, calls),
                    "writing relay": lambda: _baseline_put(
                        writing_relay_channel, gateway_payload, calls
                    ),
                },
                ROUNDS,
            )
            base, via, direct, relayed, disk, relayed_to_disk = (
                produce_s[name]
                for name in ("base", "via", "direct", "relay", "disk", "writing relay")
            )
            report(
                "produce via gateway, 1 MiB reqs, acks=1 (MB/s)", mb / via, mb / base, "MB/s", 0.5
            )
            report("produce straight to node (MB/s)", mb / direct, mb / base, "MB/s", None)
            report("  bare two-hop relay, no work (MB/s)", mb / relayed, mb / base, "MB/s", None)
            report(
                "  produce via gateway against that relay (MB/s)",
                mb / via,
                mb / relayed,
                "MB/s",
                None,
            )
            report(
                "  via gateway against a relay that writes (MB/s)",
                mb / via,
                mb / relayed_to_disk,
                "MB/s",
                None,
            )
            # Each side's processes are counted over every round (warm-up requests included).
            moved_mib = ROUNDS * (calls + 1) * len(gateway_payload) / MIB
            for name, process, baseline in (
                ("gateway", "gateway", "relay"),
                ("node", "node", "echo"),
            ):
                report(
                    f"  {name} CPU per MiB (ms, baseline: {baseline})",
                    1000 * cpu_s[process] / moved_mib,
                    1000 * max(cpu_s[baseline], 0.01) / moved_mib,
                    "ms",
                    None,
                    higher_is_better=False,
                )
            report(
                "  the same bytes, os.write to the data fs (MB/s)",
                mb / disk,
                mb / base,
                "MB/s",
                None,
            )
            if not WITH_FETCH:
                return

            # Every _produce call sent one warm-up request besides its timed ones.
            end = ROUNDS * (calls + 1) * 64
            # An untimed pass of each side learns how many bytes a fetch moves (and warms
            # the page cache alike for both).
            _, via_bytes = _fetch(admin, "/seglog.v1.Gateway/Fetch", "via-gateway", end)
            _, direct_bytes = _fetch(node_channel, "/seglog.v1.StorageNode/Fetch", "direct", end)
            assert via_bytes == direct_bytes
            fetch_s = best_in_turns(
                {
                    "via": lambda: _fetch(admin, "/seglog.v1.Gateway/Fetch", "via-gateway", end)[0],
                    "direct": lambda: _fetch(
                        node_channel, "/seglog.v1.StorageNode/Fetch", "direct", end
                    )[0],
                    "base": lambda: _baseline_stream(echo_channel, via_bytes),
                    "relay": lambda: _baseline_stream(relay_channel, via_bytes),
                },
                ROUNDS,
            )
            via_s, direct_s, base_s, relayed_s = (
                fetch_s[name] for name in ("via", "direct", "base", "relay")
            )
            fetched_mb = via_bytes / MIB
            report("fetch via gateway (MB/s)", fetched_mb / via_s, fetched_mb / base_s, "MB/s", 0.5)
            report(
                "fetch straight from node (MB/s)",
                fetched_mb / direct_s,
                fetched_mb / base_s,
                "MB/s",
                None,
            )
            report(
                "  bare two-hop stream relay, no work (MB/s)",
                fetched_mb / relayed_s,
                fetched_mb / base_s,
                "MB/s",
                None,
            )
        finally:
            for channel in channels:
                channel.close()
            for process in reversed(processes):
                process.stop()
