"""bulk_wire.Receiver: a connection's messages and record bytes read through one buffer,
whatever pieces the socket hands them over in (a real socket pair: the writer decides the
pieces), and a peer closing mid-message is an error, between messages the end."""

from __future__ import annotations

import socket
import threading

import pytest

from seglog.rpc import bulk_wire
from seglog.v1 import bulk_pb2


def chunk(partition: int, records_length: int) -> bulk_pb2.BulkFetchChunk:
    return bulk_pb2.BulkFetchChunk(topic="t", partition=partition, records_length=records_length)


def framed(messages_and_records: list[tuple[bulk_pb2.BulkFetchChunk, bytes]]) -> bytes:
    return b"".join(b"".join(bulk_wire.frame_message(m, r)) for m, r in messages_and_records)


def written_in_pieces(data: bytes, piece_bytes: int) -> socket.socket:
    """The reading end of a socket pair whose writer sends `data` `piece_bytes` at a time
    (a small send buffer: the reader meets it in pieces, never much more at once), then
    closes."""
    reader, writer = socket.socketpair()
    writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

    def write() -> None:
        with writer:
            for start in range(0, len(data), piece_bytes):
                writer.sendall(data[start : start + piece_bytes])

    threading.Thread(target=write, daemon=True).start()
    reader.settimeout(30)
    return reader


def read_all(reader: socket.socket, buffer_bytes: int) -> list[tuple[int, bytes]]:
    receiver = bulk_wire.Receiver(reader, buffer_bytes)
    got = []
    while (header := receiver.message(bulk_pb2.BulkFetchChunk)) is not None:
        records = memoryview(bytearray(header.records_length))
        receiver.exactly_into(records)
        got.append((header.partition, bytes(records)))
    assert receiver.buffered() == 0
    return got


@pytest.mark.parametrize("piece_bytes", [1, 7, 4096, 1 << 20])
@pytest.mark.parametrize("buffer_bytes", [64, 32 * 1024])
def test_messages_and_records_come_whole_in_order_whatever_the_pieces(
    piece_bytes: int, buffer_bytes: int
) -> None:
    # Records shorter than the buffer, as long as it, far longer (read straight into their
    # own buffer), none at all.
    sent = [
        (chunk(0, 5), b"abcde"),
        (chunk(1, 0), b""),
        (chunk(2, 100), bytes(range(100))),
        (chunk(3, 70_000), bytes(i % 251 for i in range(70_000))),
        (chunk(4, 31), b"x" * 31),
    ]
    with written_in_pieces(framed(sent), piece_bytes) as reader:
        assert read_all(reader, buffer_bytes) == [(m.partition, r) for m, r in sent]


def test_a_peer_closing_inside_a_message_is_an_error_not_the_end() -> None:
    whole = framed([(chunk(0, 10), b"0123456789")])
    for cut in (2, len(whole) - 10 - 3, len(whole) - 4):  # in the length, the body, the records
        with written_in_pieces(whole[:cut], 1 << 20) as reader, pytest.raises(ConnectionError):
            read_all(reader, 1024)


def test_a_message_over_the_limit_is_refused_before_it_is_read() -> None:
    too_long = (bulk_wire.MAX_MESSAGE_BYTES + 1).to_bytes(4, "big")
    with written_in_pieces(too_long, 4) as reader, pytest.raises(ConnectionError, match="over"):
        bulk_wire.Receiver(reader).message(bulk_pb2.BulkFetchChunk)
