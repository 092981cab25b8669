"""Watches the connections of the gateway's relayed long polls while they wait (bulk.md, "The
gateway's fetch relay"): a relayed poll's connection carries nothing else until its answer
is sent, so bytes arriving on it (the gateway's cancel message) or its closing mean the
gateway gave the poll up. The bulk listener's thread serving it is blocked on the fetch's
wait, not on the socket, so one thread here watches every such connection at once (epoll)
and wakes the poll, which then answers at once with what it has: the node's thread is free
again, and on a plaintext connection the gateway keeps the connection for its next fetch.

Watched only for the relay: a consumer of its own may send its next fetch before the answer
to the last, which must not cut that answer's wait short."""

from __future__ import annotations

import logging
import select
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .fetch_waits import Waiter

if TYPE_CHECKING:
    from .fetch_reads import FetchState
    from .replica_manager import ReplicaManager

logger = logging.getLogger(__name__)

# The watcher thread wakes this often to notice the listener stopping.
POLL_INTERVAL_S = 1.0


class PeerWatch:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None

    def wait_for_fetch(
        self,
        replicas: ReplicaManager,
        conn: socket.socket | None,
        states: list[FetchState],
        min_bytes: int,
        max_wait_ms: int,
        is_active: Callable[[], bool],
    ) -> None:
        """A fetch's delayed wait (ReplicaManager.wait_for_fetch); a relayed fetch's (`conn`
        its connection, None for any other) ended as well once `conn` turns readable or
        closes."""
        if conn is None:
            replicas.wait_for_fetch(states, min_bytes, max_wait_ms, is_active)
            return
        waiter = Waiter(wakes_on_records=False)  # a consumer's: on the high watermark only
        given_up = threading.Event()

        def on_readable() -> None:
            given_up.set()
            waiter.notify(None)

        self.watch(conn, on_readable)
        try:
            replicas.wait_for_fetch(
                states,
                min_bytes,
                max_wait_ms,
                lambda: is_active() and not given_up.is_set(),
                waiter,
            )
        finally:
            self.unwatch(conn)

    def watch(self, conn: socket.socket, on_readable: Callable[[], None]) -> None:
        """Run `on_readable` (once, on the watcher's thread) when `conn` turns readable or
        closes, unless `unwatch` came first."""
        fd = conn.fileno()
        with self._lock:
            if self._stopping:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="bulk-peer-watch", daemon=True
                )
                self._thread.start()
            self._callbacks[fd] = on_readable
            self._epoll.register(fd, select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT)

    def unwatch(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        with self._lock:
            if self._callbacks.pop(fd, None) is not None:
                try:
                    self._epoll.unregister(fd)
                except OSError:  # fired already (one shot) or never registered
                    pass

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
        self._epoll.close()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
            try:
                events = self._epoll.poll(POLL_INTERVAL_S)
            except OSError as exc:
                logger.warning("bulk peer watch stopped: %s", exc)
                return
            for fd, _ in events:
                with self._lock:
                    callback = self._callbacks.pop(fd, None)
                    if callback is not None:
                        try:
                            self._epoll.unregister(fd)
                        except OSError:
                            pass
                if callback is not None:
                    callback()
