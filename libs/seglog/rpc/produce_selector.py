"""The producer's sender thread waits here (client/sender.py), and carries here the produce
requests it can send without blocking.

Kafka's producer has one thread do its network I/O (NetworkClient over a Selector): it
writes requests to its leaders' connections and reads their answers between rounds of
draining the accumulator. seglog's sent each request from a thread of its own, blocked on
its socket, and handed the answer back to the sender: measured at 1,000-20,000 records/s,
about 60 futex calls per request (the GIL and the hand-offs between threads), and a third
of the producer's CPU was the kernel's.

So a request the producer may send straight to its leader over an idle plain-TCP connection
(client/produce_transport.py decides) is written by the sender thread as the socket takes
it, and its answer read as it arrives, both when `poll` finds the connection ready. `poll`
also returns when `wakeup` is called (any thread: a batch to send, an answer from another
path) or its time is up. What would block — opening a connection, asking for a grant, TLS,
gRPC — stays on produce_transport's threads, whose answers reach the sender by `wakeup`.

An exchange is bulk.md's version 3: the header message and the request's bytes out, one
length-prefixed BulkProduceAnswer back. It ends as produce_connections.py's blocking one
does: the answer; LEADER_NOT_AVAILABLE when the connection fails (the node may have
written the request: the producer's retry settles it); REQUEST_TIMED_OUT past its
deadline. A failed connection is closed, never pooled with part of an answer in it.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from ..errors import LeaderNotAvailableError, RequestTimedOutError, SeglogError
from ..v1 import bulk_pb2
from . import bulk_wire
from .bulk_client import BulkConnection
from .bulk_pool import BulkPool, NodePool

logger = logging.getLogger(__name__)

# An answer is a ProduceResponse of a few partitions: one read takes it whole.
_READ_BYTES = 64 * 1024
_READABLE = select.POLLIN | select.POLLERR | select.POLLHUP
_WRITABLE = select.POLLOUT | select.POLLERR | select.POLLHUP

# How an exchange ends: (the node's answer, None) or (None, the error standing for it).
Done = Callable[[bulk_pb2.BulkProduceAnswer | None, SeglogError | None], None]


@dataclass(eq=False)
class _Exchange:
    node: NodePool
    connection: BulkConnection
    outgoing: list[memoryview]  # what the socket has not taken yet
    request_bytes: int
    deadline_s: float  # monotonic
    timeout_s: float
    done: Done
    incoming: bytearray = field(default_factory=bytearray)


class ProduceSelector:
    """Owned by one sender thread: `start` and `poll` are called from it alone; `wakeup` from
    any thread."""

    def __init__(self, pool: BulkPool) -> None:
        self.pool = pool
        self._poll = select.poll()
        self._wakeup_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._poll.register(self._wakeup_fd, select.POLLIN)
        # A wakeup written and not yet read: later ones need no write of their own. Cleared
        # after the read, before the sender's next round looks at what woke it, so a wakeup
        # that finds it set still has its change seen.
        self._wakeup_pending = False
        self._closing = threading.Lock()  # a wakeup never writes to a descriptor closed
        self._closed = False
        self._exchanges: dict[int, _Exchange] = {}  # by the connection's descriptor
        self._next_deadline_s = float("inf")
        self.started = 0  # exchanges carried, for tests and metrics

    @property
    def exchanges(self) -> int:
        return len(self._exchanges)

    def wakeup(self) -> None:
        """Make the `poll` under way, or the next one, return at once."""
        if not self._wakeup_pending:
            with self._closing:
                if not self._closed:
                    self._wakeup_pending = True
                    os.eventfd_write(self._wakeup_fd, 1)

    def start(
        self,
        node: NodePool,
        connection: BulkConnection,
        frame: list[bytes],
        request_bytes: int,
        timeout_s: float,
        done: Done,
    ) -> None:
        """Carry `frame` (BulkConnection.produce_frame's) on `connection`, taken from the pool
        for it; `done` is called from a later `poll` (or now, when the connection fails at
        once), and the connection goes back to the pool."""
        exchange = _Exchange(
            node,
            connection,
            [memoryview(part) for part in frame],
            request_bytes,
            time.monotonic() + timeout_s,
            timeout_s,
            done,
        )
        fd = connection.fileno()
        self.started += 1
        self._exchanges[fd] = exchange
        self._next_deadline_s = min(self._next_deadline_s, exchange.deadline_s)
        self._poll.register(fd, select.POLLIN)
        self._write(fd, exchange)

    def poll(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for a wakeup or an exchange's progress, and handle what is
        ready (each exchange that ends calls its `done`)."""
        if self._exchanges:
            now = time.monotonic()
            if now >= self._next_deadline_s:
                self._expire(now)
            timeout_s = min(timeout_s, max(0.0, self._next_deadline_s - now))
        # Milliseconds, rounded up; a negative timeout would wait forever.
        for fd, events in self._poll.poll(max(0.0, timeout_s) * 1000):
            if fd == self._wakeup_fd:
                os.eventfd_read(self._wakeup_fd)
                self._wakeup_pending = False
                continue
            exchange = self._exchanges.get(fd)
            if exchange is None:
                continue
            if exchange.outgoing and events & _WRITABLE:
                self._write(fd, exchange)
            elif events & _READABLE:
                self._read(fd, exchange)

    def close(self) -> None:
        """After the sender stopped (nothing in flight). Any exchange left is failed."""
        for fd, exchange in list(self._exchanges.items()):
            self._end(fd, exchange, None, LeaderNotAvailableError("the producer closed"))
        with self._closing:
            self._closed = True
            os.close(self._wakeup_fd)

    def _write(self, fd: int, exchange: _Exchange) -> None:
        try:
            sent = exchange.connection.send_nowait(exchange.outgoing)
        except OSError as exc:
            self._failed(fd, exchange, exc)
            return
        outgoing = exchange.outgoing
        while outgoing and sent >= len(outgoing[0]):
            sent -= len(outgoing.pop(0))
        if outgoing:
            outgoing[0] = outgoing[0][sent:]
            self._poll.modify(fd, select.POLLOUT)
        else:
            self._poll.modify(fd, select.POLLIN)

    def _read(self, fd: int, exchange: _Exchange) -> None:
        try:
            received = exchange.connection.recv_nowait(_READ_BYTES)
            if received is None:
                return
            if not received:
                raise ConnectionError("the node closed the connection before answering")
            exchange.incoming += received
            answer = bulk_wire.parse_message(exchange.incoming, bulk_pb2.BulkProduceAnswer)
        except (OSError, ConnectionError, DecodeError) as exc:
            self._failed(fd, exchange, exc)
            return
        if answer is not None:
            self._end(fd, exchange, answer, None)

    def _failed(self, fd: int, exchange: _Exchange, exc: BaseException) -> None:
        node_id = exchange.node.node_id
        exchange.connection.produce_answered(exchange.request_bytes, exc)  # closes it
        self._end(
            fd,
            exchange,
            None,
            LeaderNotAvailableError(
                f"node {node_id} unavailable: {exchange.connection.address}: {exc}"
            ),
        )

    def _expire(self, now_s: float) -> None:
        for fd, exchange in list(self._exchanges.items()):
            if now_s >= exchange.deadline_s:
                node_id = exchange.node.node_id
                error = TimeoutError(f"no answer to a produce in {exchange.timeout_s:.1f} s")
                exchange.connection.produce_answered(exchange.request_bytes, error)
                self._end(
                    fd,
                    exchange,
                    None,
                    RequestTimedOutError(f"node {node_id}: {exchange.connection.address}: {error}"),
                )
        self._next_deadline_s = min(
            (e.deadline_s for e in self._exchanges.values()), default=float("inf")
        )

    def _end(
        self,
        fd: int,
        exchange: _Exchange,
        answer: bulk_pb2.BulkProduceAnswer | None,
        error: SeglogError | None,
    ) -> None:
        del self._exchanges[fd]
        self._poll.unregister(fd)
        if answer is not None:
            exchange.connection.produce_answered(exchange.request_bytes, None)
            if answer.end:  # the node refused the exchange and closes the connection
                exchange.connection.close()
        self.pool.give_back(exchange.node, exchange.connection)  # closed: only counted out
        exchange.done(answer, error)
