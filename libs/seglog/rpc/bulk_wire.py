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


class Receiver:
    """A connection's incoming bytes read through one buffer: each recv takes what the socket
    holds, up to the buffer's size, so a message's length, its body and the small record
    bytes after it (a chunk's, a relayed produce's) come in one system call rather than
    three. Large record bytes go from the socket straight into their own buffer once what was
    buffered is taken. Whoever reads the connection must read it through here: bytes may
    wait in the buffer that a selector cannot see (`buffered`)."""

    def __init__(self, sock: socket.socket, buffer_bytes: int = 32 * 1024) -> None:
        self.sock = sock
        self._buffer = bytearray(buffer_bytes)
        self._view = memoryview(self._buffer)
        self._start = 0
        self._end = 0

    def buffered(self) -> int:
        """Bytes read off the socket and not yet taken."""
        return self._end - self._start

    def _fill(self) -> int:
        """Read what the socket holds into the buffer, after what it holds already; the
        bytes read (0: the peer closed the connection)."""
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._buffer):
            kept = self._end - self._start
            self._buffer[:kept] = self._view[self._start : self._end]
            self._start, self._end = 0, kept
        n = self.sock.recv_into(self._view[self._end :])
        self._end += n
        return n

    def message(self, cls: type[M]) -> M | None:
        """The next message, or None when the peer closed the connection between messages."""
        while self.buffered() < _LENGTH.size:
            if not self._fill():
                if self.buffered():
                    raise ConnectionError("connection closed inside a message's length")
                return None
        (length,) = _LENGTH.unpack_from(self._buffer, self._start)
        if length > MAX_MESSAGE_BYTES:
            raise ConnectionError(f"a {length}-byte message is over the {MAX_MESSAGE_BYTES} limit")
        self._start += _LENGTH.size
        message: M = cls()
        if self.buffered() >= length:
            message.ParseFromString(self._view[self._start : self._start + length])
            self._start += length
            return message
        body = bytearray(length)
        self.exactly_into(memoryview(body))
        message.ParseFromString(body)
        return message

    def exactly_into(self, view: memoryview) -> None:
        """Fill `view`: first from the buffer, the rest straight from the socket;
        ConnectionError when the peer closes first."""
        total = len(view)
        taken = min(self.buffered(), total)
        view[:taken] = self._view[self._start : self._start + taken]
        self._start += taken
        if taken < total:
            if total - taken < len(self._buffer) // 2:
                while self.buffered() < total - taken:
                    if not self._fill():
                        raise ConnectionError(
                            f"connection closed after {taken + self.buffered()} of {total} bytes"
                        )
                view[taken:] = self._view[self._start : self._start + total - taken]
                self._start += total - taken
            else:
                recv_exactly_into(self.sock, view[taken:])


def recv_message(sock: socket.socket, cls: type[M]) -> M | None:
    """The next message, or None when the peer closed the connection between messages; no
    byte after it is read (two receives: for a reader that leaves the rest on the socket,
    tests and tools; the node and the bulk client read through a Receiver)."""
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
