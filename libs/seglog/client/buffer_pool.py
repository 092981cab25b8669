"""The producer's memory: `buffer_memory` bytes in all, handed out as `batch_size` buffers.

As Kafka's BufferPool: buffers of the poolable size come back to a free list when their batch
completes and are handed out again; other sizes (a record larger than `batch_size`) are
allocated on their own and only their bytes are returned to the budget. When the budget is
spent, `allocate` waits, first come first served, up to `max_block_ms`, then raises.
"""

from __future__ import annotations

import collections
import threading
import time

from ..errors import RequestTimedOutError, SeglogError


class BufferExhaustedError(RequestTimedOutError):
    """`send` waited `max_block_ms` for producer memory and none came free (a timeout, as
    Kafka's BufferExhaustedException is)."""


class BufferPool:
    def __init__(self, total_bytes: int, poolable_size: int) -> None:
        self.total_bytes = total_bytes
        self.poolable_size = poolable_size
        self._lock = threading.Lock()
        self._free: collections.deque[bytearray] = collections.deque()
        # Bytes not held by any buffer, free-list buffers excluded.
        self._unallocated = total_bytes
        self._waiters: collections.deque[threading.Condition] = collections.deque()
        self._closed = False

    @property
    def available_bytes(self) -> int:
        with self._lock:
            return self._unallocated + len(self._free) * self.poolable_size

    @property
    def queued_waiters(self) -> int:
        with self._lock:
            return len(self._waiters)

    def allocate(self, size: int, max_block_ms: int) -> bytearray:
        if size > self.total_bytes:
            raise SeglogError(
                f"a batch of {size} bytes is larger than buffer_memory ({self.total_bytes})"
            )
        with self._lock:
            if self._closed:
                raise SeglogError("the producer is closed")
            if size == self.poolable_size and self._free and not self._waiters:
                return self._free.popleft()
            if not self._waiters and self._unallocated + self._free_bytes() >= size:
                self._reserve(size)
                return bytearray(size)
            # Wait in line: memory freed goes to the oldest waiter first.
            turn = threading.Condition(self._lock)
            self._waiters.append(turn)
            # Integer nanoseconds: the wait never ends a rounding error before max_block_ms.
            deadline_ns = time.monotonic_ns() + max_block_ms * 1_000_000
            try:
                while True:
                    if self._closed:
                        raise SeglogError("the producer was closed while send waited for memory")
                    if self._waiters[0] is turn:
                        if size == self.poolable_size and self._free:
                            return self._free.popleft()
                        if self._unallocated + self._free_bytes() >= size:
                            self._reserve(size)
                            return bytearray(size)
                    remaining_ns = deadline_ns - time.monotonic_ns()
                    if remaining_ns <= 0:
                        raise BufferExhaustedError(
                            f"no producer memory for {size} bytes after {max_block_ms} ms "
                            f"(buffer_memory {self.total_bytes}); batches are not completing"
                        )
                    turn.wait(remaining_ns / 1e9)
            finally:
                self._waiters.remove(turn)
                if self._waiters:
                    self._waiters[0].notify()

    def deallocate(self, buffer: bytearray) -> None:
        self.deallocate_all([buffer])

    def deallocate_all(self, buffers: list[bytearray]) -> None:
        if not buffers:
            return
        with self._lock:
            for buffer in buffers:
                if len(buffer) == self.poolable_size:
                    self._free.append(buffer)
                else:
                    self._unallocated += len(buffer)
            if self._waiters:
                self._waiters[0].notify()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for waiter in self._waiters:
                waiter.notify()

    def _free_bytes(self) -> int:
        return len(self._free) * self.poolable_size

    def _reserve(self, size: int) -> None:
        """Take `size` from the unallocated budget, releasing free-list buffers if short."""
        while self._unallocated < size:
            self._free.pop()
            self._unallocated += self.poolable_size
        self._unallocated -= size
