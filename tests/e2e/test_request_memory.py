"""A gateway's memory under many large requests and answers at once, measured on a real
process (its peak resident set, VmHWM, reset before each attack): bounded by
queued.max.request.bytes over all its connections, not by socket.request.max.bytes per
connection. Every attack runs first against a gateway without the bounds, as this run's
baseline, then against one with a POOL_BYTES pool and CONCURRENT_CALLS calls. (gRPC decodes a
request before the pool sees it: what bounds that path is services/gateway/request_memory.py's
comment on max.concurrent.requests, with its measurements.)"""

from __future__ import annotations

import concurrent.futures
import socket
import struct
from pathlib import Path

import grpc
import pytest

from seglog.client.fetched import next_offset_after
from seglog.client.gateway import FetchPosition, GatewayClient
from seglog.v1 import common_pb2, gateway_pb2_grpc
from services.gateway.fetch_threads import MAX_FETCH_THREADS
from tests.batches import make_batch
from tests.e2e.test_processes import ProcessCluster
from tests.kafka_flood import FRAMED_API_VERSIONS_V0
from tests.ports import free_ports

MIB = 1024 * 1024
CONNECTIONS = 16
FRAME_BYTES = 32 * MIB
POOL_BYTES = 64 * MIB
PRODUCE_V9 = struct.pack(">hh", 0, 9)
# The fetch attack: a topic holding ANSWER_PARTITIONS x BATCHES_PER_PARTITION batches of
# about 1 MiB, read whole by FETCHERS clients at once, each asking for up to 64 MiB.
ANSWER_PARTITIONS = 4
BATCHES_PER_PARTITION = 12
FETCHERS = 24
CONCURRENT_CALLS = FETCHERS
# Allocator slack, gRPC's transport buffers, the measuring's own noise.
MARGIN_BYTES = 32 * MIB


def _status_value(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key}")


class Gateway:
    """A one-node cluster whose gateway has a Kafka listener and the given pool; `growth`
    measures an attack by the rise of the gateway's peak resident set over its size before."""

    def __init__(
        self, root: Path, queued_max_request_bytes: int, max_concurrent_requests: int
    ) -> None:
        root.mkdir()
        [self.kafka_port] = free_ports(1)
        self.cluster = ProcessCluster(
            root,
            nodes=1,
            gateway_args=[
                "--kafka-listen",
                f"127.0.0.1:{self.kafka_port}",
                "--queued-max-request-bytes",
                str(queued_max_request_bytes),
                "--max-concurrent-requests",
                str(max_concurrent_requests),
            ],
        )
        self.cluster.admin.create_topic("kept", 1, 1)
        self.cluster.admin.create_topic("answers", ANSWER_PARTITIONS, 1)
        batch = make_batch([b"a" * (MIB - 256)])
        for _ in range(BATCHES_PER_PARTITION):
            answers = self.cluster.client.produce(
                "answers", dict.fromkeys(range(ANSWER_PARTITIONS), batch)
            )
            assert all(a.error == 0 for a in answers)

    @property
    def address(self) -> str:
        return self.cluster.gateway.address

    def growth(self, attack) -> int:  # type: ignore[no-untyped-def]
        pid = self.cluster.gateway.pid
        # Linux: writing 5 resets the peak resident set (VmHWM) to the current one.
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before = _status_value(pid, "VmRSS")
        attack(self)
        grew = _status_value(pid, "VmHWM") - before
        # Nothing was lost or stuck: the gateway still takes a produce.
        [answer] = self.cluster.client.produce("kept", {0: make_batch([b"fine"])})
        assert answer.error == 0
        return grew


@pytest.fixture(scope="module")
def gateways(tmp_path_factory):
    root = tmp_path_factory.mktemp("request-memory")
    unbounded = Gateway(root / "unbounded", -1, -1)
    try:
        bounded = Gateway(root / "bounded", POOL_BYTES, CONCURRENT_CALLS)
    except BaseException:
        unbounded.cluster.close()
        raise
    yield unbounded, bounded
    bounded.cluster.close()
    unbounded.cluster.close()


def _send_large_frame(port: int) -> None:
    """One Kafka frame of FRAME_BYTES whose body does not parse (the listener closes the
    connection once it has read it): what it costs is the reading. An ApiVersions first: a
    frame past 512 KiB before the first request is refused unread."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as attacker:
        attacker.sendall(FRAMED_API_VERSIONS_V0)
        (size,) = struct.unpack(">i", _read_exactly(attacker, 4))
        _read_exactly(attacker, size)
        attacker.sendall(struct.pack(">i", FRAME_BYTES) + PRODUCE_V9)
        chunk = b"\xff" * MIB
        sent = len(PRODUCE_V9)
        try:
            while sent < FRAME_BYTES:
                attacker.sendall(chunk[: min(MIB, FRAME_BYTES - sent)])
                sent += min(MIB, FRAME_BYTES - sent)
            attacker.recv(1)  # the gateway closes the connection
        except OSError:
            pass  # closed before the whole frame went: it was refused unread


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def _large_kafka_frames(gateway: Gateway) -> None:
    with concurrent.futures.ThreadPoolExecutor(CONNECTIONS) as pool:
        list(pool.map(lambda _: _send_large_frame(gateway.kafka_port), range(CONNECTIONS)))


@pytest.mark.slow
def test_many_large_kafka_requests_stay_within_the_gateways_request_pool(gateways):
    """16 connections each sending a 32 MiB frame at once: without the bound the gateway's
    peak grows by about 16 x 32 MiB; with a 64 MiB pool, by about the pool (a full pool
    mutes the other connections before their bodies are read)."""
    unbounded, bounded = (g.growth(_large_kafka_frames) for g in gateways)
    print(
        f"gateway peak RSS growth: unbounded {unbounded / MIB:.0f} MiB, "
        f"{POOL_BYTES // MIB} MiB pool {bounded / MIB:.0f} MiB"
    )
    assert unbounded > CONNECTIONS * FRAME_BYTES // 2, "the attack did not reach the gateway"
    assert bounded < POOL_BYTES + 2 * FRAME_BYTES + MARGIN_BYTES, (
        f"peak grew by {bounded / MIB:.0f} MiB"
    )


def _read_whole_topic(address: str) -> tuple[int, str]:
    """One fetch of every partition from offset 0, max_bytes 64 MiB, read to its end; the
    record bytes and the call's status."""
    request = common_pb2.FetchRequest(min_bytes=1, max_wait_ms=0, max_bytes=64 * MIB)
    for p in range(ANSWER_PARTITIONS):
        request.partitions.add(
            topic="answers", partition=p, fetch_offset=0, partition_max_bytes=64 * MIB
        )
    received = 0
    with grpc.insecure_channel(
        address, options=[("grpc.max_receive_message_length", -1)]
    ) as channel:
        try:
            for message in gateway_pb2_grpc.GatewayStub(channel).Fetch(request, timeout=60):
                received += len(message.records)
        except grpc.RpcError as exc:
            return received, exc.code().name
    return received, "OK"


@pytest.mark.slow
def test_large_fetch_answers_stay_within_the_gateways_request_pool(gateways):
    """24 clients each reading a 48 MiB topic whole at once (20 served, the rest refused
    SERVER_BUSY by the fetch threads' bound). Measured here: without the bound the gateway's
    peak grew by 209-560 MiB (answers waiting in gRPC's buffers); with a 64 MiB pool, each
    fetch reserves its answer first (at most the pool / 2 / fetch threads) and asks the node
    for no more: 18-25 MiB."""
    results: dict[str, list[tuple[int, str]]] = {}

    def attack(gateway: Gateway) -> None:
        with concurrent.futures.ThreadPoolExecutor(FETCHERS) as pool:
            results[gateway.address] = list(
                pool.map(lambda _: _read_whole_topic(gateway.address), range(FETCHERS))
            )

    unbounded, bounded = (g.growth(attack) for g in gateways)
    print(
        f"gateway peak RSS growth under {FETCHERS} large fetches: unbounded "
        f"{unbounded / MIB:.0f} MiB, {POOL_BYTES // MIB} MiB pool {bounded / MIB:.0f} MiB"
    )
    topic_bytes = ANSWER_PARTITIONS * BATCHES_PER_PARTITION * (MIB - 256)
    for gateway in gateways:
        answered = [got for got, status in results[gateway.address] if status == "OK"]
        assert len(answered) >= MAX_FETCH_THREADS // 2
        assert all(got > 0 for got in answered), "a fetch was answered with nothing"
    assert all(got >= topic_bytes for got, _ in results[gateways[0].address] if got)
    # With the bound, answers are smaller (the client asks again), never refused for size.
    share_bytes = POOL_BYTES // 2 // MAX_FETCH_THREADS
    assert all(got <= share_bytes + MIB for got, _ in results[gateways[1].address])
    # Without the bound the same attack goes past what the bound holds the gateway to.
    assert unbounded > POOL_BYTES + MARGIN_BYTES, "the attack did not reach the gateway"
    assert bounded < POOL_BYTES + MARGIN_BYTES, f"peak grew by {bounded / MIB:.0f} MiB"
    # A consumer still reads the whole topic through the bounded gateway, answer by answer.
    client = GatewayClient(gateways[1].address)
    try:
        offsets = dict.fromkeys(range(ANSWER_PARTITIONS), 0)
        for _ in range(4 * ANSWER_PARTITIONS * BATCHES_PER_PARTITION):
            positions = [
                FetchPosition("answers", p, offset, 64 * MIB)
                for p, offset in offsets.items()
                if offset < BATCHES_PER_PARTITION
            ]
            if not positions:
                break
            for fetched in client.fetch(positions, max_bytes=64 * MIB):
                offset = offsets[fetched.partition]
                offsets[fetched.partition] = next_offset_after(fetched.records, offset)
        assert offsets == dict.fromkeys(range(ANSWER_PARTITIONS), BATCHES_PER_PARTITION)
    finally:
        client.close()
