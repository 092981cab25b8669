"""The gateway's relayed fetch spoken to a node's bulk listener by hand, over a plain socket:
the request as the relay frames it, and one answer read to its end chunk."""

from __future__ import annotations

import socket

from seglog.rpc import bulk_wire
from seglog.v1 import bulk_pb2


def relayed_fetch(
    grant: bytes,
    signature: bytes,
    partitions: list[tuple[str, int, int | None]],
    *,
    replica_id: int | None = None,
) -> bulk_pb2.BulkFetchRequest:
    """A fetch as the gateway relays it: (topic, partition, leader epoch or None) from offset
    0, under `grant`."""
    request = bulk_pb2.BulkFetchRequest(
        version=bulk_wire.BULK_VERSION, grant=grant, signature=signature
    )
    for topic, partition, epoch in partitions:
        p = request.fetch.partitions.add(
            topic=topic, partition=partition, fetch_offset=0, partition_max_bytes=1 << 20
        )
        if epoch is not None:
            p.current_leader_epoch = epoch
    if replica_id is not None:
        request.fetch.replica_id = replica_id
    return request


def answer_chunks(
    sock: socket.socket, request: bulk_pb2.BulkFetchRequest
) -> list[bulk_pb2.BulkFetchChunk]:
    """The chunks of one answer, up to its end chunk (included)."""
    bulk_wire.send_message(sock, request)
    chunks = []
    while True:
        chunk = bulk_wire.recv_message(sock, bulk_pb2.BulkFetchChunk)
        assert chunk is not None, "the node closed the connection mid-answer"
        if chunk.records_length:
            bulk_wire.recv_exactly_into(sock, memoryview(bytearray(chunk.records_length)))
        chunks.append(chunk)
        if chunk.end:
            return chunks
