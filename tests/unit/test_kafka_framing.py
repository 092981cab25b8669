"""The Kafka listener's framing and error table, without a cluster: frames read over a real
socket pair, headers parsed at each header version, every seglog reason mapped."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from opentelemetry import trace

from seglog.errors import PermissionDeniedError, UnknownTopicOrPartitionError
from seglog.v1 import common_pb2
from services.gateway.kafka import error_codes
from services.gateway.kafka.api_table import ApiTable
from services.gateway.kafka.channel import Channel, PeerClosed, Step
from services.gateway.kafka.connection import KafkaConnection
from services.gateway.kafka.framing import (
    FrameError,
    decode_body,
    parse_request,
    request_header_is_flexible,
)
from services.gateway.kafka.kafka_call import ConnectionIdentity
from services.gateway.kafka.listener import parse_listener
from services.memory_pool import RequestMemoryPool


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _channel(server: socket.socket, max_request_bytes: int = 100) -> Channel:
    """A channel reading `server` as a network thread does, on a listener needing no SASL;
    nothing in reading uses the gateway."""
    server.setblocking(False)
    table = ApiTable()
    table.register(ApiVersionsRequest, 0, 3, lambda call, request: None)
    connection = KafkaConnection(
        ConnectionIdentity("127.0.0.1", 1),
        table,
        None,  # type: ignore[arg-type]
        tracer=trace.get_tracer(__name__),
        advertised_address="127.0.0.1:9092",
    )
    return Channel(
        server,
        connection,
        table,
        RequestMemoryPool(1024),
        max_request_bytes=max_request_bytes,
        now=time.monotonic(),
    )


def _api_versions_frame(extra: bytes = b"") -> bytes:
    """ApiVersions v0's header (client id 'c') and `extra` body bytes, with its size."""
    body = struct.pack(">hhih", 18, 0, 7, 1) + b"c" + extra
    return struct.pack(">i", len(body)) + body


def test_a_frame_is_read_whole_across_sends_and_a_clean_close_ends_the_stream(pair):
    client, server = pair
    channel = _channel(server)
    frame = _api_versions_frame(b"body")
    client.sendall(frame[:7])
    assert channel.read_frame(time.monotonic()) is Step.BLOCKED
    client.sendall(frame[7:])
    assert channel.read_frame(time.monotonic()) is Step.COMPLETE
    payload, reserved, raw = channel.take_frame()
    assert bytes(payload) == frame[4:] and reserved == len(frame) - 4 and not raw
    client.close()
    with pytest.raises(PeerClosed):
        channel.read_frame(time.monotonic())


@pytest.mark.parametrize("size", [-1, 0, 3, 101])
def test_a_size_outside_the_bound_is_refused_before_reading_the_body(pair, size):
    client, server = pair
    channel = _channel(server)
    client.sendall(struct.pack(">i", size))
    with pytest.raises(FrameError, match="socket.request.max.bytes"):
        channel.read_frame(time.monotonic())
    assert channel.pool.used_bytes == 0


def test_a_large_frame_before_the_first_request_is_refused_unread(pair):
    client, server = pair
    channel = _channel(server, max_request_bytes=100 * 1024 * 1024)
    client.sendall(struct.pack(">i", 100 * 1024 * 1024))
    with pytest.raises(FrameError, match="sasl.server.max.receive.size"):
        channel.read_frame(time.monotonic())
    assert channel.pool.used_bytes == 0


def test_a_connection_closed_mid_frame_is_a_frame_error(pair):
    client, server = pair
    channel = _channel(server)
    client.sendall(_api_versions_frame(b"partial" * 3)[:20])
    client.close()
    with pytest.raises(FrameError, match="closed"):
        channel.read_frame(time.monotonic())


@pytest.mark.parametrize("version", [1, 9])
def test_request_headers_parse_at_both_header_versions(version):
    request = MetadataRequest[version](topics=[MetadataRequest.MetadataRequestTopic(name="t")])
    request.with_header(correlation_id=42, client_id="unit")
    payload = bytes(request.encode(header=True))
    frame = parse_request(payload, MetadataRequest)
    assert (frame.api_key, frame.api_version, frame.correlation_id, frame.client_id) == (
        3,
        version,
        42,
        "unit",
    )
    assert [t.name for t in decode_body(MetadataRequest, frame).topics] == ["t"]


def test_header_version_follows_flexibility_even_past_the_codec():
    assert not request_header_is_flexible(ApiVersionsRequest, 2)
    assert request_header_is_flexible(ApiVersionsRequest, 3)
    assert request_header_is_flexible(ApiVersionsRequest, 99)  # a newer client's


def test_a_truncated_body_is_a_frame_error():
    request = MetadataRequest[4](topics=[MetadataRequest.MetadataRequestTopic(name="topic")])
    request.with_header(correlation_id=1, client_id="unit")
    payload = bytes(request.encode(header=True))
    with pytest.raises(FrameError, match="malformed"):
        decode_body(MetadataRequest, parse_request(payload[:-3], MetadataRequest))


def test_every_seglog_reason_has_a_kafka_code():
    reasons = set(common_pb2.ErrorCode.DESCRIPTOR.values_by_name)
    assert reasons <= error_codes.mapped_reasons()
    for reason in reasons:
        code = error_codes.kafka_error_code(reason)
        assert code != error_codes.UNKNOWN_SERVER_ERROR or reason == "UNKNOWN"
    assert error_codes.kafka_error_code(UnknownTopicOrPartitionError("x")) == 3
    assert error_codes.kafka_error_code("NOT_LEADER_OR_FOLLOWER") == 6
    assert error_codes.kafka_error_code(ValueError("not ours")) == -1


@pytest.mark.parametrize(
    ("resource", "code"), [("topic", 29), ("group", 30), ("cluster", 31), ("transactional_id", 53)]
)
def test_permission_denied_becomes_the_authorization_failure_of_its_resource(resource, code):
    assert error_codes.kafka_error_code(PermissionDeniedError("no"), resource) == code


def test_the_table_refuses_versions_the_codec_lacks_and_a_second_registration():
    table = ApiTable()
    with pytest.raises(ValueError, match="codec"):
        table.register(ProduceRequest, 3, ProduceRequest.max_version + 1, lambda c, r: None)
    table.register(ProduceRequest, 3, 9, lambda c, r: None)
    with pytest.raises(ValueError, match="twice"):
        table.register(ProduceRequest, 3, 9, lambda c, r: None)
    assert [(e.api_key, e.name, e.serves(2), e.serves(9)) for e in table.entries()] == [
        (0, "Produce", False, True)
    ]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("127.0.0.1:9092", ("PLAINTEXT", "127.0.0.1:9092")),
        ("PLAINTEXT://0.0.0.0:9092", ("PLAINTEXT", "0.0.0.0:9092")),
        ("sasl_ssl://[::1]:9093", ("SASL_SSL", "[::1]:9093")),
    ],
)
def test_listener_names_parse_as_kafka_writes_them(text, parsed):
    assert parse_listener(text) == parsed


@pytest.mark.parametrize("text", ["GOPHER://h:1", "h:1,h:2", "h:99999", "nohostport"])
def test_bad_listener_names_are_refused(text):
    with pytest.raises(ValueError):
        parse_listener(text)
