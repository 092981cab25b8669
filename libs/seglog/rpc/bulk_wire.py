"""The bulk path's framing (proto/seglog/v1/bulk.md): each message a big-endian u32 length and
the serialized protobuf; records follow a chunk header as raw bytes. Shared by the storage
node's bulk server and the bulk client (bulk_client.py), with the version of the protocol
they speak."""

from __future__ import annotations

import socket
import struct
from typing import TypeVar

from google.protobuf.message import Message

# BulkFetchRequest.version: the node refuses a request of any other version as a whole.
BULK_VERSION = 2  # 2: fetch-session header chunks (bulk.md)
# A BulkFetchRequest of this version is the gateway's relay of a produce request (bulk.md).
BULK_PRODUCE_VERSION = 3
MAX_MESSAGE_BYTES = 1024 * 1024
_LENGTH = struct.Struct(">I")
M = TypeVar("M", bound=Message)


# Raw bytes this small go out in one send with their message; larger ones in a send of
# their own rather than copied.
_JOIN_BELOW_BYTES = 64 * 1024


def send_message(sock: socket.socket, message: Message, raw: bytes = b"") -> None:
    """The message, then `raw` (bytes its header announced, as a relayed produce's)."""
    for data in frame_message(message, raw):
        sock.sendall(data)


def frame_message(message: Message, raw: bytes = b"") -> list[bytes]:
    """`send_message`'s bytes, for a caller that writes them itself (a list: large raw
    bytes are not copied)."""
    data = message.SerializeToString()
    if len(raw) < _JOIN_BELOW_BYTES:
        return [_LENGTH.pack(len(data)) + data + raw]
    return [_LENGTH.pack(len(data)) + data, raw]


def parse_message(buffer: bytearray, cls: type[M]) -> M | None:
    """The message `buffer` holds whole (and nothing after it), or None while it is still
    short of it. ConnectionError: over the size limit, or bytes past the message."""
    if len(buffer) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack_from(buffer)
    if length > MAX_MESSAGE_BYTES:
        raise ConnectionError(f"a {length}-byte message is over the {MAX_MESSAGE_BYTES} limit")
    end = _LENGTH.size + length
    if len(buffer) < end:
        return None
    if len(buffer) > end:
        raise ConnectionError(f"{len(buffer) - end} bytes after the answer, none asked for")
    message: M = cls()
    message.ParseFromString(memoryview(buffer)[_LENGTH.size :])
    return message


def recv_exactly_into(sock: socket.socket, view: memoryview) -> None:
    """Fill `view` from the socket (recv_into, no intermediate copy); ConnectionError when
    the peer closes first."""
    got = 0
    total = len(view)
    while got < total:
        n = sock.recv_into(view[got:], total - got)
        if n == 0:
            raise ConnectionError(f"connection closed after {got} of {total} bytes")
        got += n


def recv_message(sock: socket.socket, cls: type[M]) -> M | None:
    """The next message, or None when the peer closed the connection between messages."""
    head = bytearray(_LENGTH.size)
    view = memoryview(head)
    first = sock.recv_into(view, len(head))
    if first == 0:
        return None
    if first < len(head):
        recv_exactly_into(sock, view[first:])
    (length,) = _LENGTH.unpack(head)
    if length > MAX_MESSAGE_BYTES:
        raise ConnectionError(f"a {length}-byte message is over the {MAX_MESSAGE_BYTES} limit")
    body = bytearray(length)
    recv_exactly_into(sock, memoryview(body))
    message: M = cls()
    message.ParseFromString(body)  # parsing copies what it keeps: the buffer is free after
    return message
