"""BulkConnection, the one bulk client, against a loopback listener that answers what each
test scripts: whole chunks handed out, and one error for everything that goes wrong (a
refusal, a frame that does not parse, a node gone mid-answer, a node that cannot be
reached), each closing the connection so that no later fetch reads part of an old answer."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

import pytest

from seglog.rpc import bulk_wire
from seglog.rpc.bulk_client import BulkConnection, BulkFetchError
from seglog.v1 import bulk_pb2, common_pb2

TIMEOUT_S = 30
Script = Callable[[socket.socket, bulk_pb2.BulkFetchRequest], None]


class ScriptedNode:
    """A bulk listener on loopback serving one connection: each request it reads is
    answered by `script`."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.settimeout(TIMEOUT_S)
            while (request := _request_or_none(conn)) is not None:
                try:
                    self.script(conn, request)
                except OSError:
                    return  # the client closed the connection before the answer's end

    def close(self) -> None:
        self._listener.close()
        self._thread.join(timeout=TIMEOUT_S)


def _request_or_none(conn: socket.socket) -> bulk_pb2.BulkFetchRequest | None:
    try:
        return bulk_wire.recv_message(conn, bulk_pb2.BulkFetchRequest)
    except OSError:
        return None


def _chunk(records: bytes, **fields) -> tuple[bulk_pb2.BulkFetchChunk, bytes]:
    return bulk_pb2.BulkFetchChunk(topic="t", records_length=len(records), **fields), records


def _answer(*chunks: tuple[bulk_pb2.BulkFetchChunk, bytes]) -> Script:
    def script(conn: socket.socket, request: bulk_pb2.BulkFetchRequest) -> None:
        for header, records in chunks:
            bulk_wire.send_message(conn, header)
            conn.sendall(records)

    return script


@pytest.fixture
def serve():
    nodes: list[ScriptedNode] = []

    def start(script: Script) -> BulkConnection:
        node = ScriptedNode(script)
        nodes.append(node)
        return BulkConnection.open(node.address, connect_timeout_s=TIMEOUT_S)

    yield start
    for node in nodes:
        node.close()


def _fetch(connection: BulkConnection) -> list:
    request = common_pb2.FetchRequest(max_bytes=1 << 20)
    request.partitions.add(topic="t", partition=0, fetch_offset=0)
    connection.send(b"grant", b"signature", request, node_id=1)
    return list(connection.receive())


def test_an_answer_is_its_chunks_in_order_with_their_headers_and_records(serve):
    connection = serve(
        _answer(
            _chunk(b"first", high_watermark=7, segment_base_offset=3),
            _chunk(b"", diverging_epoch=2, diverging_end_offset=5),
            _chunk(b"", end=True),
        )
    )
    first, diverging = _fetch(connection)
    assert bytes(first.records) == b"first" and first.topic == "t"
    assert first.high_watermark == 7 and first.header.segment_base_offset == 3
    assert diverging.header.HasField("diverging_epoch") and diverging.records == b""
    assert not connection.closed  # kept for the next fetch
    connection.close()


def test_requests_carry_the_wire_version_the_grant_and_its_signature(serve):
    node_requests: list[bulk_pb2.BulkFetchRequest] = []

    def script(conn, request):
        node_requests.append(request)
        _answer(_chunk(b"", end=True))(conn, request)

    connection = serve(script)
    _fetch(connection)
    _fetch(connection)
    assert [r.version for r in node_requests] == [bulk_wire.BULK_VERSION] * 2
    assert {(r.grant, r.signature) for r in node_requests} == {(b"grant", b"signature")}
    connection.close()


def test_a_refusal_is_an_error_and_closes_the_connection(serve):
    refusal = _chunk(b"", end=True, error=common_pb2.INVALID_REQUEST, error_message="expired")
    connection = serve(_answer(refusal))
    with pytest.raises(BulkFetchError, match="refused: expired"):
        _fetch(connection)
    assert connection.closed


def test_a_frame_that_does_not_parse_is_an_error_not_a_crash(serve):
    def garbage(conn, request):
        conn.sendall(struct.pack(">I", 4) + b"\xff\xff\xff\xff")

    connection = serve(garbage)
    with pytest.raises(BulkFetchError):
        _fetch(connection)
    assert connection.closed


def test_a_node_gone_mid_answer_delivers_the_whole_chunks_before_and_no_partial_one(serve):
    def cut(conn, request):
        _answer(_chunk(b"whole"))(conn, request)
        header, _ = _chunk(b"x" * 1000)
        bulk_wire.send_message(conn, header)
        conn.sendall(b"x" * 10)
        conn.shutdown(socket.SHUT_RDWR)

    connection = serve(cut)
    request = common_pb2.FetchRequest()
    connection.send(b"grant", b"signature", request, node_id=1)
    received = []
    with pytest.raises(BulkFetchError):
        for message in connection.receive():
            received.append(bytes(message.records))
    assert received == [b"whole"] and connection.closed


def test_an_answer_left_before_its_end_closes_the_connection(serve):
    connection = serve(_answer(_chunk(b"one"), _chunk(b"two"), _chunk(b"", end=True)))
    connection.send(b"grant", b"signature", common_pb2.FetchRequest(), node_id=1)
    answer = connection.receive()
    assert bytes(next(answer).records) == b"one"
    answer.close()  # the caller stopped reading: "two" is still on the wire
    assert connection.closed


def test_a_node_that_cannot_be_reached_is_an_error():
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()  # nothing listens there any more
    with pytest.raises(BulkFetchError, match="cannot reach"):
        BulkConnection.open(address, connect_timeout_s=TIMEOUT_S)
