"""A Fetch answer framed as several buffers, its large record sets left where the nodes' bytes
are (views), so the listener writes them without copying them into one answer first: the
codec's encode copies every record byte (a 4 MiB answer: 2-6 ms of copying, against 0.1 ms
for the rest of it). Record sets under INLINE_RECORDS_BYTES are copied in with the fields
around them, so an answer of many small partitions is still a few buffers, not one per
partition. The bytes are exactly the codec's (tests/unit/test_kafka_fetch_encoding.py
checks every served version against it).

The layout (FetchResponse.json, versions 4-17; "flexible" is v12+):

    frame        size int32 | header | body
    header       correlation_id int32 | (flexible) tagged fields
    body         throttle_time_ms int32 | (v7+) error_code int16, session_id int32 |
                 topics array | (flexible) tagged fields: 0 = node_endpoints (v16+)
    topic        name string (v4-12) or topic_id 16 bytes (v13+) | partitions array |
                 (flexible) tagged fields
    partition    partition_index int32 | error_code int16 | high_watermark int64 |
                 last_stable_offset int64 | (v5+) log_start_offset int64 |
                 aborted_transactions nullable array (producer_id int64, first_offset int64,
                 (flexible) tagged fields) |
                 (v11+) preferred_read_replica int32 | records nullable bytes |
                 (flexible) tagged fields: 1 = current_leader (leader_id int32,
                 leader_epoch int32, tagged fields)
    node         node_id int32 | host string | port int32 | rack nullable string |
                 tagged fields

Arrays and bytes are an int32 count (-1: null) before v12, an unsigned varint of count + 1
(0: null) from v12; strings an int16 length, or a varint of length + 1. Tagged fields are a
varint count, then each as varint tag, varint size, data. Fields this adapter never fills
(diverging_epoch, snapshot_id) are written empty; aborted_transactions is null for a
READ_UNCOMMITTED fetch, as Kafka's broker answers it.
"""

from __future__ import annotations

import struct
from typing import Any

FIRST_FLEXIBLE_VERSION = 12
FIRST_BY_ID_VERSION = 13
FIRST_NODE_ENDPOINTS_VERSION = 16
# Record sets smaller than this are copied in with their fields (one buffer for many small
# partitions); larger ones go as the views they are.
INLINE_RECORDS_BYTES = 16 * 1024

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # partition_index, error_code, hw, last stable
_INT64 = struct.Struct(">q")
_LEADER = struct.Struct(">ii")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Writer:
    """Buffers of one answer: fields accumulate in `current`, a large record set is its own
    buffer between them."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.pieces: list[bytes | bytearray | memoryview] = []
        self.current = bytearray()

    def count(self, n: int) -> None:
        self.current += _uvarint(n + 1) if self.flexible else _INT32.pack(n)

    def string(self, text: str | None) -> None:
        if text is None:
            self.current += b"\x00" if self.flexible else _INT16.pack(-1)
            return
        data = text.encode()
        self.current += _uvarint(len(data) + 1) if self.flexible else _INT16.pack(len(data))
        self.current += data

    def records(self, records: bytes | bytearray | memoryview | None) -> None:
        if records is None:
            self.current += b"\x00" if self.flexible else _INT32.pack(-1)
            return
        self.count(len(records))
        if len(records) < INLINE_RECORDS_BYTES:
            self.current += records
        else:
            self.pieces.append(self.current)
            self.pieces.append(records if isinstance(records, memoryview) else memoryview(records))
            self.current = bytearray()

    def done(self) -> list[bytes | bytearray | memoryview]:
        if self.current:
            self.pieces.append(self.current)
        return self.pieces


def _partition(out: _Writer, version: int, p: Any) -> None:
    buf = out.current
    buf += _PARTITION_HEAD.pack(
        p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
    )
    if version >= 5:
        buf += _INT64.pack(p.log_start_offset)
    aborted = p.aborted_transactions
    if aborted is None:
        buf += b"\x00" if out.flexible else _INT32.pack(-1)
    else:
        out.count(len(aborted))
        for a in aborted:
            out.current += _INT64.pack(a.producer_id) + _INT64.pack(a.first_offset)
            if out.flexible:  # each entry is a struct with its own tagged fields
                out.current += b"\x00"
    if version >= 11:
        out.current += _INT32.pack(p.preferred_read_replica)
    out.records(p.records)
    if out.flexible:
        leader = p.current_leader
        if leader is None:
            out.current += b"\x00"
        else:
            data = _LEADER.pack(leader.leader_id, leader.leader_epoch) + b"\x00"
            out.current += b"\x01" + _uvarint(1) + _uvarint(len(data)) + data


def _node_endpoints(nodes: list[Any]) -> bytes:
    out = _Writer(flexible=True)
    out.count(len(nodes))
    for n in nodes:
        out.current += _INT32.pack(n.node_id)
        out.string(n.host)
        out.current += _INT32.pack(n.port)
        out.string(n.rack)
        out.current += b"\x00"
    return bytes(out.current)


def encode_fetch_response(
    response: Any, version: int, correlation_id: int
) -> list[bytes | bytearray | memoryview]:
    """The framed answer (size, header, body) as buffers, in order; their bytes joined are
    the codec's `encode(header=True, framed=True)`."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    out = _Writer(flexible)
    out.current += _INT32.pack(0)  # the frame's size, filled in below
    out.current += _INT32.pack(correlation_id)
    if flexible:
        out.current += b"\x00"
    out.current += _INT32.pack(response.throttle_time_ms)
    if version >= 7:
        out.current += _INT16.pack(response.error_code) + _INT32.pack(response.session_id)
    out.count(len(response.responses))
    for topic in response.responses:
        if version >= FIRST_BY_ID_VERSION:
            out.current += topic.topic_id.bytes
        else:
            out.string(topic.topic)
        out.count(len(topic.partitions))
        for p in topic.partitions:
            _partition(out, version, p)
        if flexible:
            out.current += b"\x00"
    if flexible:
        nodes = response.node_endpoints if version >= FIRST_NODE_ENDPOINTS_VERSION else None
        if nodes:
            data = _node_endpoints(nodes)
            out.current += b"\x01" + b"\x00" + _uvarint(len(data)) + data
        else:
            out.current += b"\x00"
    pieces = out.done()
    size = sum(len(piece) for piece in pieces) - _INT32.size
    first = pieces[0]
    assert isinstance(first, bytearray)
    _INT32.pack_into(first, 0, size)
    return pieces
