"""A gateway's memory under many large requests at once, measured on a real process (its
peak resident set, VmHWM): bounded by queued.max.request.bytes over all its connections, not
by socket.request.max.bytes per connection. The same attack runs first against a gateway
without the bound, as this run's baseline."""

from __future__ import annotations

import concurrent.futures
import socket
import struct

import pytest

from tests.batches import make_batch
from tests.e2e.test_memory_bounds import _peak_rss_bytes
from tests.e2e.test_processes import ProcessCluster

MIB = 1024 * 1024
CONNECTIONS = 16
FRAME_BYTES = 32 * MIB
POOL_BYTES = 64 * MIB
PRODUCE_V9 = struct.pack(">hh", 0, 9)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _send_large_frame(port: int) -> None:
    """One Kafka frame of FRAME_BYTES whose body does not parse (the listener closes the
    connection once it has read it): what it costs is the reading."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as attacker:
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


def _peak_growth_under_attack(root, queued_max_request_bytes: int) -> int:
    root.mkdir()
    port = _free_port()
    cluster = ProcessCluster(
        root,
        nodes=1,
        gateway_args=[
            "--kafka-listen",
            f"127.0.0.1:{port}",
            "--queued-max-request-bytes",
            str(queued_max_request_bytes),
        ],
    )
    try:
        cluster.admin.create_topic("kept", 1, 1)
        before = _peak_rss_bytes(cluster.gateway.pid)
        with concurrent.futures.ThreadPoolExecutor(CONNECTIONS) as pool:
            list(pool.map(lambda _: _send_large_frame(port), range(CONNECTIONS)))
        growth = _peak_rss_bytes(cluster.gateway.pid) - before
        # Nothing was lost or stuck: the gateway still takes a produce.
        [answer] = cluster.client.produce("kept", {0: make_batch([b"fine"])})
        assert answer.error == 0
        return growth
    finally:
        cluster.close()


@pytest.mark.slow
def test_many_large_kafka_requests_stay_within_the_gateways_request_pool(tmp_path):
    """16 connections each sending a 32 MiB frame at once: without the bound the gateway's
    peak grows by about 16 x 32 MiB; with a 64 MiB pool, by about the pool (a full pool
    mutes the other connections before their bodies are read)."""
    unbounded = _peak_growth_under_attack(tmp_path / "unbounded", -1)
    bounded = _peak_growth_under_attack(tmp_path / "bounded", POOL_BYTES)
    print(
        f"gateway peak RSS growth: unbounded {unbounded / MIB:.0f} MiB, "
        f"{POOL_BYTES // MIB} MiB pool {bounded / MIB:.0f} MiB"
    )
    assert unbounded > CONNECTIONS * FRAME_BYTES // 2, "the attack did not reach the gateway"
    assert bounded < POOL_BYTES + 2 * FRAME_BYTES, f"peak grew by {bounded / MIB:.0f} MiB"
