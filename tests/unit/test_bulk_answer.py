"""services/storage_node/bulk_answer.py: what an answer gathers goes out whole and in order,
small record bytes copied in among the messages, large ones sent by the slice itself after
what came before them, over a real socket pair read by bulk_wire.Receiver."""

from __future__ import annotations

import socket
import threading
from typing import cast

from seglog.rpc import bulk_wire
from seglog.storage.segment_reads import SegmentSlice
from seglog.v1 import bulk_pb2
from services.storage_node.bulk_answer import COPY_BELOW_BYTES, FLUSH_AT_BYTES, AnswerWriter


class Slice:
    """A segment slice's part in an answer: its size, its bytes, and sending them itself."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.sent_itself = False

    def read(self) -> bytes:
        return self.data

    def write_to(self, out: socket.socket) -> int:
        self.sent_itself = True
        out.sendall(self.data)
        return self.size


def test_an_answer_arrives_whole_in_order_small_bytes_copied_large_ones_sent_by_the_slice():
    slices = [
        Slice(b"a" * 10),
        Slice(bytes(i % 256 for i in range(COPY_BELOW_BYTES))),  # at the limit: sent itself
        Slice(b"c" * (COPY_BELOW_BYTES - 1)),
        *(Slice(bytes([i]) * 9_000) for i in range(2 * FLUSH_AT_BYTES // 9_000)),  # flushes
    ]
    reader, writer = socket.socketpair()
    writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # sends meet a full buffer
    received: list[tuple[int, bytes]] = []

    def read() -> None:
        receiver = bulk_wire.Receiver(reader)
        while (header := receiver.message(bulk_pb2.BulkFetchChunk)) is not None:
            records = memoryview(bytearray(header.records_length))
            receiver.exactly_into(records)
            received.append((header.partition, bytes(records)))
            if header.end:
                return

    reading = threading.Thread(target=read)
    reading.start()
    with reader, writer:
        answer = AnswerWriter(writer)
        answer.message(bulk_pb2.BulkFetchChunk(session_id=7))
        for partition, found in enumerate(slices):
            answer.message(bulk_pb2.BulkFetchChunk(partition=partition, records_length=found.size))
            assert answer.records(cast(SegmentSlice, found)) == found.size
        answer.message(bulk_pb2.BulkFetchChunk(end=True))
        answer.flush()
        reading.join(30)
    assert received == [(0, b""), *((p, s.data) for p, s in enumerate(slices)), (0, b"")]
    assert [s.sent_itself for s in slices] == [s.size >= COPY_BELOW_BYTES for s in slices]
