"""The threads that run the Kafka listener's requests (Kafka's KafkaRequestHandlerPool), fed
by the network threads through a bounded queue (Kafka's RequestChannel, `queued.max.requests`).

A network thread never blocks on a full queue (Kafka's processor does): `try_submit` says no,
the connection stays muted with its request read, and the network thread tries again when a
handler has taken a request from the queue (`on_room`). So a burst past the queue waits in
the clients' sockets, not in the gateway's memory, and the network threads go on reading and
writing every other connection.

Threads are started as work comes, up to the pool's size, and then kept: an idle listener
costs no handler thread, a busy one at most `threads`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

logger = logging.getLogger(__name__)

# Kafka's num.io.threads and queued.max.requests.
DEFAULT_NUM_IO_THREADS = 8
DEFAULT_QUEUED_MAX_REQUESTS = 500
STOP_JOIN_TIMEOUT_S = 5.0

Work = Callable[[], None]


class RequestHandlerPool:
    def __init__(self, name: str, threads: int, queue_size: int) -> None:
        if threads < 1 or queue_size < 1:
            raise ValueError(f"{name}: {threads} threads and a queue of {queue_size}: both >= 1")
        self.name = name
        self.threads = threads
        self.queue_size = queue_size
        self._queue: deque[Work] = deque()
        self._lock = threading.Condition()
        self._idle = 0
        self._workers: list[threading.Thread] = []
        self._stopped = False
        self._on_room: list[Callable[[], None]] = []
        self.busy = 0  # running a request now

    def notify_on_room(self, callback: Callable[[], None]) -> None:
        """`callback()` when a full queue has room again (it must not block)."""
        self._on_room.append(callback)

    def try_submit(self, work: Work) -> bool:
        """Queue `work` unless the queue is full (or the pool stopped)."""
        return self._submit(work, bounded=True)

    def submit_completion(self, work: Work) -> bool:
        """Queue the building of an answer that was pending (later.py), past the queue's
        bound: it is no new request but one admitted already, and each connection has at
        most one pending (so at most max.connections of them). False once stopped."""
        return self._submit(work, bounded=False)

    def _submit(self, work: Work, *, bounded: bool) -> bool:
        with self._lock:
            if self._stopped or (bounded and len(self._queue) >= self.queue_size):
                return False
            self._queue.append(work)
            if self._idle:
                self._lock.notify()
            # An idle thread counts as idle until it wakes and takes its request: a second
            # request submitted before then must start a thread of its own, else it waits
            # for a busy thread to finish (an acks=all produce may wait its timeout).
            if len(self._queue) > self._idle and len(self._workers) < self.threads:
                worker = threading.Thread(
                    target=self._run, name=f"{self.name}-{len(self._workers)}", daemon=True
                )
                self._workers.append(worker)
                worker.start()
        return True

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopped:
                    self._idle += 1
                    self._lock.wait()
                    self._idle -= 1
                if self._stopped:
                    return
                was_full = len(self._queue) >= self.queue_size
                work = self._queue.popleft()
                self.busy += 1
            if was_full:
                for callback in list(self._on_room):
                    callback()
            try:
                work()
            except Exception:  # the work reports its own failures; this keeps the thread
                logger.exception("%s: a request's work failed", self.name)
            finally:
                # Not kept while waiting for the next: it holds the request's frames, whose
                # pool bytes are already given back once its answers are sent.
                del work
                with self._lock:
                    self.busy -= 1

    @property
    def started_threads(self) -> int:
        return len(self._workers)

    @property
    def idle(self) -> int:
        """Threads waiting for a request (a woken one counts until it takes its request)."""
        return self._idle

    @property
    def queued(self) -> int:
        return len(self._queue)

    def stop(self) -> None:
        """No more work is taken; a request being run finishes on its thread, waited for
        STOP_JOIN_TIMEOUT_S in all (a long poll may wait longer: its thread is left to end
        on its own, a daemon)."""
        with self._lock:
            self._stopped = True
            self._queue.clear()
            self._lock.notify_all()
            workers = list(self._workers)
        deadline = time.monotonic() + STOP_JOIN_TIMEOUT_S
        for worker in workers:
            if worker is not threading.current_thread():
                worker.join(max(0.0, deadline - time.monotonic()))
