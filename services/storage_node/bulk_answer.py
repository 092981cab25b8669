"""A bulk fetch answer's bytes on their way out (bulk_server.py): each partition's chunk
(`send_chunk`: its header, then its records), its messages and small record bytes gathered
to go out together, one send for a whole answer at a steady rate.

An answer to a follower or a consumer keeping up is a session header, a chunk header, a
few KiB of records and the end message. Sent as they came, that was four sends, and the
records' sendfile took two more system calls for the descriptor it sends from (a dup, a
close). Each system call of a Python thread gives the interpreter's lock up and takes it
back, which wakes and switches threads on a node serving many connections. Records below
COPY_BELOW_BYTES are therefore read into the answer (a pread) and sent with it; larger ones
still go by sendfile, with no copy in user space, after what was gathered before them.
Records read from the object store (remote_fetches.py) are in memory already: they are sent
as they are, in the same framing, so a bulk client cannot tell them from local ones."""

from __future__ import annotations

import socket

from google.protobuf.message import Message

from seglog.rpc import bulk_wire
from seglog.rpc.status import error_code_for
from seglog.storage.segment_reads import SegmentSlice
from seglog.v1 import bulk_pb2

from .fetch_reads import FetchChunk

# Record bytes below this are copied into the answer rather than sent by sendfile.
COPY_BELOW_BYTES = 16 * 1024
# What is gathered goes out once it comes to this much, so a large answer of small chunks is
# not held whole in memory.
FLUSH_AT_BYTES = 64 * 1024


class AnswerWriter:
    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self._parts: list[bytes | memoryview] = []
        self._size = 0

    def message(self, message: Message) -> None:
        for part in bulk_wire.frame_message(message):
            self._add(part)

    def records(self, found: SegmentSlice) -> int:
        """The slice's bytes after what was added before; the bytes sent."""
        if found.size < COPY_BELOW_BYTES:
            self._add(found.read())
            return found.size
        self.flush()
        return found.write_to(self.conn)

    def copy(self, data: bytes | memoryview) -> None:
        """Bytes already in memory (a remote read's), after what was added before."""
        if len(data) < COPY_BELOW_BYTES:
            self._add(data)
            return
        self.flush()
        self.conn.sendall(data)

    def flush(self) -> None:
        """Send what was gathered."""
        if not self._parts:
            return
        data = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        self._parts = []
        self._size = 0
        self.conn.sendall(data)

    def _add(self, data: bytes | memoryview) -> None:
        self._parts.append(data)
        self._size += len(data)
        if self._size >= FLUSH_AT_BYTES:
            self.flush()


def send_chunk(answer: AnswerWriter, chunk: FetchChunk) -> int:
    """Add one chunk to the answer; the record bytes it sent."""
    header = bulk_pb2.BulkFetchChunk(
        topic=chunk.topic,
        partition=chunk.partition,
        high_watermark=chunk.high_watermark,
        log_start_offset=chunk.log_start_offset,
        segment_base_offset=chunk.segment_base_offset,
        last_stable_offset=chunk.last_stable_offset,
    )
    for aborted in chunk.aborted:
        header.aborted_transactions.add(
            producer_id=aborted.producer_id, first_offset=aborted.first_offset
        )
    if chunk.diverging is not None:
        header.diverging_epoch, header.diverging_end_offset = chunk.diverging
    if chunk.error is not None:
        header.error = error_code_for(chunk.error)
        header.error_message = str(chunk.error)
        answer.message(header)
        return 0
    if chunk.remote is not None:  # read from the object store: in memory, no file to send
        header.records_length = len(chunk.remote)
        answer.message(header)
        answer.copy(chunk.remote)
        return len(chunk.remote)
    found = chunk.found.segment_slice if chunk.found is not None else None
    if found is None or not found.size:
        answer.message(header)
        return 0
    header.records_length = found.size
    answer.message(header)
    return answer.records(found)
