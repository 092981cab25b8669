"""Kafka's framing, as the broker reads it: every request and response is a 4-byte
big-endian size followed by that many bytes. A request opens with its header (api key,
api version, correlation id, client id; header v2 adds tagged fields for flexible versions);
a response with the correlation id (header v1 adds tagged fields, except ApiVersions' which
is always v0 so that a client of any version can read it).

A size that is negative or past `socket.request.max.bytes` is refused before anything is
allocated for it, as Kafka's broker refuses it (it closes the connection). Before a
connection has authenticated, a size past `sasl.server.max.receive.size` (512 KiB, Kafka's)
is refused too.

The listener reads a request in two steps (channel.py): the size and the header's fixed
fields into a small buffer of the connection's own, checked (`FIXED_HEADER`: api key int16,
api version int16, correlation id int32, client id length int16, -1 for null; 10 bytes, the
shortest request header there is), and only then the frame's memory is taken from the
gateway's request pool and the rest read after those 10 bytes into one buffer.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_header import RequestHeader

from .request_schema import decode_request

SIZE = struct.Struct(">i")
# api_key int16, api_version int16: the part of the header read before the api is known.
API_KEY_AND_VERSION = struct.Struct(">hh")
API_VERSIONS_KEY = 18
# The header's fixed fields: api key, api version, correlation id, client id's length.
FIXED_HEADER = struct.Struct(">hhih")
# Kafka's sasl.server.max.receive.size: the largest frame read before authentication.
SASL_SERVER_MAX_RECEIVE_SIZE = 512 * 1024
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
    """The request body at the frame's version; FrameError when it does not parse, or when
    Kafka's reader would refuse it (request_schema.py: lengths past the end, nulls where the
    schema has none)."""
    try:
        return decode_request(request_class, frame.body, frame.api_version)
    except Exception as exc:  # the codec raises whatever its reads meet
        raise FrameError(f"malformed {request_class.name} v{frame.api_version}: {exc!r}") from None


def encode_response(response: Any, correlation_id: int) -> bytearray:
    """A response with its header, framed (ApiVersions' header stays v0: the codec's
    ApiVersionsResponse knows it). The codec's own buffer copy, not copied again: a fetch
    answer's records are megabytes."""
    response.with_header(correlation_id=correlation_id)
    encoded: bytearray = response.encode(header=True, framed=True)
    return encoded


class ScatteredFrame:
    """A response already framed, as several buffers written one after the other without
    being joined (a Fetch answer's large record sets are views of the nodes' bytes:
    fetch_encoding.py). A handler returns one instead of a response object."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: list[bytes | bytearray | memoryview]) -> None:
        self.pieces = [memoryview(piece) for piece in pieces]
        self.size = sum(len(piece) for piece in self.pieces)

    def __len__(self) -> int:
        return self.size
