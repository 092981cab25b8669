"""A byte budget for requests in flight: Kafka's `queued.max.request.bytes`. A request takes
its bytes before it is read, waiting up to `wait_s` for room, and gives them back once it is
answered; past the wait it is refused retriably (MEMORY_BUDGET_EXHAUSTED). A request larger
than the whole budget runs when it is alone (Kafka's pool lets one allocation overshoot), so a
limit below the largest request never refuses one for good. The gateway bounds all its
connections with one (gateway/request_memory.py), a storage node its bulk listener's produce
requests (storage_node/bulk_produce.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from seglog.errors import MemoryBudgetExhaustedError

# Kafka's default is -1 (unbounded); seglog bounds a gateway, and a node's bulk produce, at
# 256 MiB.
DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024
DEFAULT_WAIT_S = 30.0


class RequestMemoryPool:
    def __init__(
        self,
        limit_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES,
        wait_s: float = DEFAULT_WAIT_S,
        *,
        owner: str = "the gateway",
    ) -> None:
        # limit_bytes <= 0: unbounded (Kafka's -1); the pool still counts.
        self.limit_bytes = limit_bytes
        self.owner = owner  # named in the refusal
        self.wait_s = wait_s
        self.used_bytes = 0
        self.peak_bytes = 0
        self.waited = 0
        self.refused = 0
        self._room = threading.Condition()
        # Called (outside the pool's lock) whenever bytes are given back: the Kafka listener's
        # network threads retry the connections they muted waiting for room, never blocking.
        self._on_release: list[Callable[[], None]] = []

    def _fits(self, nbytes: int) -> bool:
        return (
            self.limit_bytes <= 0
            or self.used_bytes + nbytes <= self.limit_bytes
            or self.used_bytes == 0
        )

    def acquire(self, nbytes: int, wait_s: float | None = None) -> None:
        """Take `nbytes`, waiting up to `wait_s` (the pool's by default) for room;
        MemoryBudgetExhaustedError (retriable) when none came."""
        wait_s = self.wait_s if wait_s is None else wait_s
        with self._room:
            if not self._fits(nbytes):
                self.waited += 1
                deadline = time.monotonic() + wait_s
                while not self._fits(nbytes):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.refused += 1
                        raise MemoryBudgetExhaustedError(
                            f"{self.owner}'s {self.limit_bytes} bytes for requests in flight "
                            f"(queued.max.request.bytes) stayed in use for {wait_s:g} s; "
                            f"retry"
                        )
                    self._room.wait(left)
            self._take(nbytes)

    def try_acquire(self, nbytes: int, *, overshoot: bool = False) -> bool:
        """Take `nbytes` if they fit now (within the limit; with `overshoot`, also when the
        pool is empty, as `acquire` lets a request larger than the pool run alone)."""
        with self._room:
            fits = (
                self._fits(nbytes)
                if overshoot
                else (self.limit_bytes <= 0 or self.used_bytes + nbytes <= self.limit_bytes)
            )
            if not fits:
                return False
            self._take(nbytes)
            return True

    def notify_on_release(self, callback: Callable[[], None]) -> None:
        """`callback()` after every release (from the releasing thread; it must not block)."""
        self._on_release.append(callback)

    def forget_on_release(self, callback: Callable[[], None]) -> None:
        if callback in self._on_release:
            self._on_release.remove(callback)

    def add(self, nbytes: int) -> None:
        """Take `nbytes` without waiting (an admitted request's answer)."""
        with self._room:
            self._take(nbytes)

    def release(self, nbytes: int) -> None:
        if nbytes:
            with self._room:
                self.used_bytes -= nbytes
                self._room.notify_all()
            for callback in list(self._on_release):
                callback()

    def _take(self, nbytes: int) -> None:
        self.used_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.used_bytes)

    @contextmanager
    def holding(self) -> Iterator[RequestShare]:
        """A request's share: what it takes is given back when the block ends."""
        share = RequestShare(self)
        try:
            yield share
        finally:
            self.release(share.held_bytes)


class RequestShare:
    def __init__(self, pool: RequestMemoryPool) -> None:
        self.pool = pool
        self.held_bytes = 0

    def acquire(self, nbytes: int, wait_s: float | None = None) -> None:
        self.pool.acquire(nbytes, wait_s)
        self.held_bytes += nbytes

    def try_acquire(self, nbytes: int) -> bool:
        if not self.pool.try_acquire(nbytes):
            return False
        self.held_bytes += nbytes
        return True

    def add(self, nbytes: int) -> None:
        self.pool.add(nbytes)
        self.held_bytes += nbytes
