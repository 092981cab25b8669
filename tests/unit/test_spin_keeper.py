"""A channel opened with keep_event_thread keeps gRPC's event thread between calls: a real
gRPC server on loopback (with the health service every seglog server has), one streaming call
after another."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from seglog.rpc import wire
from seglog.rpc.channels import open_channel
from tests.waiting import wait_until

CALLS = 10


def _stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    yield b"one"


@pytest.fixture
def address() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "test.Spin",
                {
                    "Stream": grpc.unary_stream_rpc_method_handler(
                        _stream,
                        request_deserializer=wire.identity,
                        response_serializer=wire.identity,
                    )
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait()


def _event_threads() -> set[threading.Thread]:
    # gRPC's fork-managed threads run their target through `_run`: "Thread-N (_run)".
    return {t for t in threading.enumerate() if t.name.endswith("(_run)")}


def _threads_seen_during_calls(channel: grpc.Channel) -> set[threading.Thread]:
    call = channel.unary_stream("/test.Spin/Stream", wire.identity, wire.identity)
    seen: set[threading.Thread] = set()
    for _ in range(CALLS):
        for _message in call(b"", timeout=10):
            seen |= _event_threads()
    return seen


def test_one_event_thread_serves_calls_one_after_another(address):
    before = _event_threads()
    channel = open_channel(address, keep_event_thread=True)
    try:
        assert len(_threads_seen_during_calls(channel) - before) == 1
    finally:
        channel.close()
    # Closed, the channel's thread ends (the kept call is cancelled and not opened again).
    assert wait_until(lambda: not (_event_threads() - before), timeout_s=10)


def test_without_it_each_call_starts_a_thread(address):
    """What the keeper removes (the test above would fail without it)."""
    before = _event_threads()
    channel = open_channel(address)
    try:
        assert len(_threads_seen_during_calls(channel) - before) > 1
    finally:
        channel.close()
