"""The sender thread's own produce exchanges (rpc/produce_selector.py), against a node
stand-in on a real loopback socket: the answer read however it arrives, a request larger
than the socket takes at once written as it drains, and a connection that fails or stays
silent ends the exchange with the threaded path's errors and is never pooled again."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from seglog.errors import LeaderNotAvailableError, RequestTimedOutError, SeglogError
from seglog.rpc import bulk_wire
from seglog.rpc.bulk_pool import BulkPool
from seglog.rpc.produce_selector import ProduceSelector
from seglog.v1 import bulk_pb2

BOUND_S = 10.0
NODE_ID = 1


class NodeStandIn:
    """A listener that takes one connection and runs `behave(connection)` on it."""

    def __init__(self, behave: Callable[[socket.socket], None]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, args=(behave,), daemon=True)
        self._thread.start()

    def _serve(self, behave: Callable[[socket.socket], None]) -> None:
        connection, _ = self._listener.accept()
        with connection:
            behave(connection)

    def close(self) -> None:
        self._listener.close()
        self._thread.join(BOUND_S)
        assert not self._thread.is_alive()


def read_request(connection: socket.socket) -> tuple[bulk_pb2.BulkFetchRequest, bytes]:
    header = bulk_wire.recv_message(connection, bulk_pb2.BulkFetchRequest)
    assert header is not None
    body = bytearray(header.produce_length)
    bulk_wire.recv_exactly_into(connection, memoryview(body))
    return header, bytes(body)


def answer_bytes(response: bytes) -> bytes:
    return b"".join(bulk_wire.frame_message(bulk_pb2.BulkProduceAnswer(response=response)))


class Outcome:
    def __init__(self) -> None:
        self.ended: list[tuple[bulk_pb2.BulkProduceAnswer | None, SeglogError | None]] = []

    def __call__(self, answer, error) -> None:
        self.ended.append((answer, error))


def run_exchange(node: NodeStandIn, request: bytes, timeout_s: float = BOUND_S):
    """Start one exchange of `request` and poll until it ends: (outcome, pool, selector,
    whether the socket took the whole request at once)."""
    pool = BulkPool(4)
    selector = ProduceSelector(pool)
    taken = pool.take(NODE_ID, node.address)
    assert taken is not None
    pool_node, connection = taken
    outcome = Outcome()
    frame = connection.produce_frame(b"grant", b"signature", request, node_id=NODE_ID)
    selector.start(pool_node, connection, frame, len(request), timeout_s, outcome)
    written_at_once = not any(e.outgoing for e in selector._exchanges.values())
    deadline = time.monotonic() + BOUND_S + timeout_s
    while not outcome.ended and time.monotonic() < deadline:
        selector.poll(0.5)
    assert len(outcome.ended) == 1
    assert selector.exchanges == 0
    return outcome.ended[0], pool, selector, written_at_once


def test_an_answer_in_pieces_is_read_whole_and_the_connection_goes_back_idle():
    received: list[bytes] = []

    def behave(connection: socket.socket) -> None:
        header, body = read_request(connection)
        assert header.version == bulk_wire.BULK_PRODUCE_VERSION and header.grant == b"grant"
        received.append(body)
        for byte in answer_bytes(b"the response"):  # a byte at a time
            connection.sendall(bytes([byte]))
        connection.recv(1)  # held open until the client closes

    node = NodeStandIn(behave)
    (answer, error), pool, selector, _ = run_exchange(node, b"the request")
    assert error is None and answer.response == b"the response"
    assert received == [b"the request"]
    assert pool.open_connections(NODE_ID) == (1, 1)  # kept for the next request
    selector.close()
    pool.close()
    node.close()


def test_a_request_larger_than_the_socket_takes_is_written_as_it_drains():
    request = bytes(range(256)) * (32 * 1024)  # 8 MiB: more than loopback buffers hold
    received: list[bytes] = []

    def behave(connection: socket.socket) -> None:
        _, body = read_request(connection)
        received.append(body)
        connection.sendall(answer_bytes(b"ok"))
        connection.recv(1)

    node = NodeStandIn(behave)
    (answer, error), pool, selector, written_at_once = run_exchange(node, request)
    assert not written_at_once
    assert error is None and answer.response == b"ok"
    assert received == [request]
    selector.close()
    pool.close()
    node.close()


def test_a_node_that_closes_before_answering_costs_the_connection():
    def behave(connection: socket.socket) -> None:
        read_request(connection)  # written, maybe; never answered

    node = NodeStandIn(behave)
    (answer, error), pool, selector, _ = run_exchange(node, b"lost")
    assert answer is None and isinstance(error, LeaderNotAvailableError)
    assert error.retriable  # the node may have written it: the producer's retry settles it
    assert pool.open_connections(NODE_ID) == (0, 0)
    selector.close()
    pool.close()
    node.close()


def test_a_silent_node_times_the_exchange_out_and_its_connection_is_closed():
    released = threading.Event()

    def behave(connection: socket.socket) -> None:
        read_request(connection)
        released.wait(BOUND_S)

    node = NodeStandIn(behave)
    (answer, error), pool, selector, _ = run_exchange(node, b"unanswered", timeout_s=0.2)
    assert answer is None and isinstance(error, RequestTimedOutError)
    assert pool.open_connections(NODE_ID) == (0, 0)  # an answer may still come on it
    released.set()
    selector.close()
    pool.close()
    node.close()


def test_a_wakeup_from_another_thread_ends_the_wait_and_is_harmless_after_close():
    selector = ProduceSelector(BulkPool(1))
    waiting = threading.Thread(target=selector.poll, args=(60.0,))
    waiting.start()
    selector.wakeup()
    waiting.join(BOUND_S)
    assert not waiting.is_alive()
    selector.wakeup()  # pending: the next poll returns at once
    selector.poll(60.0)
    selector.close()
    selector.wakeup()  # a producer thread's flush after close: no write to a closed descriptor


@pytest.mark.parametrize("closed_after_answer", [False, True])
def test_the_exchange_ends_once_whatever_follows_the_answer(closed_after_answer):
    """An answer, and the node closing right after it (read in the same poll or the next):
    one outcome, the answer."""

    def behave(connection: socket.socket) -> None:
        read_request(connection)
        connection.sendall(answer_bytes(b"once"))
        if closed_after_answer:
            connection.shutdown(socket.SHUT_WR)
        connection.recv(1)

    node = NodeStandIn(behave)
    (answer, error), pool, selector, _ = run_exchange(node, b"r")
    assert error is None and answer.response == b"once"
    selector.close()
    pool.close()
    node.close()
