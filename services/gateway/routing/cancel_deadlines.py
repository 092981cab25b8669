"""A deadline for each relayed poll the gateway cancelled (fetch_relay.py): a node answers a
cancel at once, unless it cannot (paused, a long garbage collection), and then the thread
reading its answer would wait out the poll's own timeout. One thread for the whole relay
keeps the deadlines in a heap and gives up, once its grace has passed, each cancelled fetch
still unanswered (the fetch's `give_up`, which shuts its connection down)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class CancelDeadlines:
    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()  # ties in time are taken in arrival order
        self._thread: threading.Thread | None = None
        self._closed = False

    def after_grace(self, give_up: Callable[[], None]) -> None:
        """Run `give_up` (on this object's thread) once the grace has passed; it must
        itself do nothing when the fetch was answered meanwhile."""
        with self._changed:
            if self._closed:
                return
            due = time.monotonic() + self.grace_s
            heapq.heappush(self._heap, (due, next(self._order), give_up))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="fetch-relay-cancels", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._closed:
                    if self._heap and self._heap[0][0] <= time.monotonic():
                        break
                    wait_s = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._changed.wait(wait_s)
                if self._closed:
                    return
                _, _, give_up = heapq.heappop(self._heap)
            give_up()
