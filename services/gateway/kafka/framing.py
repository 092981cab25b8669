"""Kafka's framing, as the broker reads it: every request and response is a 4-byte
big-endian size followed by that many bytes. A request opens with its header (api key,
api version, correlation id, client id; header v2 adds tagged fields for flexible versions);
a response with the correlation id (header v1 adds tagged fields, except ApiVersions' which
is always v0 so that a client of any version can read it).

A size that is negative or past `socket.request.max.bytes` is refused before anything is
allocated for it, as Kafka's broker refuses it (it closes the connection).
"""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_header import RequestHeader

SIZE = struct.Struct(">i")
# api_key int16, api_version int16: the part of the header read before the api is known.
API_KEY_AND_VERSION = struct.Struct(">hh")
API_VERSIONS_KEY = 18
# A request header is its fixed fields, a client id (at most 32,767 bytes) and, flexible,
# tagged fields; one longer than this is malformed.
MAX_HEADER_BYTES = 64 * 1024


class FrameError(Exception):
    """A frame the listener does not read on: the connection is closed."""


@dataclass(frozen=True)
class RequestFrame:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: memoryview


def read_exactly(sock: socket.socket, size: int) -> bytearray | None:
    """`size` bytes (read into one buffer, never copied after), or None when the peer closed
    the connection first (after none of them); a close mid-way is a FrameError."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = sock.recv_into(view[received:], size - received)
        if count == 0:
            if received == 0:
                return None
            raise FrameError(f"connection closed after {received} of {size} bytes")
        received += count
    return buffer


def read_frame(
    sock: socket.socket,
    max_request_bytes: int,
    reserve: Callable[[int], None] | None = None,
) -> bytearray | None:
    """The next request frame's bytes (without its size), None at a clean end of stream.
    `reserve(size)` is called once the size is read and checked, before the body is read
    or its buffer made: it may wait (the connection is muted meanwhile) or raise."""
    prefix = read_exactly(sock, SIZE.size)
    if prefix is None:
        return None
    (size,) = SIZE.unpack(prefix)
    if size < API_KEY_AND_VERSION.size or size > max_request_bytes:
        raise FrameError(
            f"request size {size} is outside {API_KEY_AND_VERSION.size}.."
            f"{max_request_bytes} (socket.request.max.bytes)"
        )
    if reserve is not None:
        reserve(size)
    payload = read_exactly(sock, size)
    if payload is None:
        raise FrameError(f"connection closed before a request of {size} bytes")
    return payload


def request_header_is_flexible(request_class: Any, api_version: int) -> bool:
    """Header v2 for flexible versions. A version past the codec's (an ApiVersions from a
    newer client) is flexible when the api has flexible versions at all, as in Kafka's
    `ApiKeys.requestHeaderVersion`."""
    if api_version > request_class.max_version:
        return request_class._flexible_versions is not None
    return bool(request_class.flexible_version_q(api_version))


def parse_request(payload: bytes | bytearray, request_class: Any | None) -> RequestFrame:
    """The header of a request frame; `request_class` (None: an api the listener does not
    know) decides the header's version. FrameError when the header does not parse."""
    api_key, api_version = API_KEY_AND_VERSION.unpack_from(payload)
    flexible = request_class is not None and request_header_is_flexible(request_class, api_version)
    # The header alone is read through a stream: a copy of its bytes, not of the request's.
    stream = io.BytesIO(memoryview(payload)[:MAX_HEADER_BYTES])
    try:
        header = RequestHeader.decode(stream, flexible=flexible)
    except Exception as exc:  # the codec raises whatever its reads meet
        raise FrameError(f"malformed request header: {exc!r}") from None
    return RequestFrame(
        api_key,
        api_version,
        int(header.correlation_id),
        header.client_id,
        memoryview(payload)[stream.tell() :],
    )


def decode_body(request_class: Any, frame: RequestFrame) -> Any:
    """The request body at the frame's version; FrameError when it does not parse."""
    try:
        return request_class.decode(frame.body, version=frame.api_version)
    except Exception as exc:  # the codec raises whatever its reads meet
        raise FrameError(f"malformed {request_class.name} v{frame.api_version}: {exc!r}") from None


def encode_response(response: Any, correlation_id: int) -> bytearray:
    """A response with its header, framed (ApiVersions' header stays v0: the codec's
    ApiVersionsResponse knows it). The codec's own buffer copy, not copied again: a fetch
    answer's records are megabytes."""
    response.with_header(correlation_id=correlation_id)
    encoded: bytearray = response.encode(header=True, framed=True)
    return encoded
