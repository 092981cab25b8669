"""The Kafka listener's framing and error table, without a cluster: frames read over a real
socket pair, headers parsed at each header version, every seglog reason mapped."""

from __future__ import annotations

import socket
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from seglog.errors import PermissionDeniedError, UnknownTopicOrPartitionError
from seglog.v1 import common_pb2
from services.gateway.kafka import error_codes
from services.gateway.kafka.api_table import ApiTable
from services.gateway.kafka.framing import (
    FrameError,
    decode_body,
    parse_request,
    read_frame,
    request_header_is_flexible,
)
from services.gateway.kafka.listener import parse_listener


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_a_frame_is_read_whole_and_a_clean_close_ends_the_stream(pair):
    client, server = pair
    client.sendall(struct.pack(">i", 6) + b"abc")
    client.sendall(b"def")
    assert read_frame(server, 100) == b"abcdef"
    client.close()
    assert read_frame(server, 100) is None


@pytest.mark.parametrize("size", [-1, 0, 3, 101])
def test_a_size_outside_the_bound_is_refused_before_reading_the_body(pair, size):
    client, server = pair
    client.sendall(struct.pack(">i", size))
    with pytest.raises(FrameError, match="socket.request.max.bytes"):
        read_frame(server, 100)


def test_a_connection_closed_mid_frame_is_a_frame_error(pair):
    client, server = pair
    client.sendall(struct.pack(">i", 50) + b"partial")
    client.close()
    with pytest.raises(FrameError, match="closed"):
        read_frame(server, 100)


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
