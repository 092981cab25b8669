"""What the data path needs of the transport a call came in on, and nothing more: to be told
when the call ends (a long poll's node calls are cancelled then, and its wait slot given
back) and whether it still runs; and, for client quotas, whether the transport throttles by
muting its connection after the answer (Kafka's KIP-219) instead of holding the answer back.

A gRPC ServicerContext is a CallScope as it is; the Kafka listener passes a `CallEnd`, which
it finishes once it has read what it needs of a fetch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol


class CallScope(Protocol):
    def add_callback(self, callback: Callable[[], object]) -> bool:
        """Run `callback` when the call ends; False (and not run) if it has ended already."""
        ...

    def is_active(self) -> bool: ...


class CallEnd:
    """A CallScope for a call that is not gRPC's: callbacks run once, at `finish`."""

    def __init__(self, defer_throttle: Callable[[int], bool] | None = None) -> None:
        self._callbacks: list[Callable[[], object]] = []
        self._finished = False
        self._lock = threading.Lock()  # fetch pumps add callbacks from their own threads
        self._defer_throttle = defer_throttle

    def add_callback(self, callback: Callable[[], object]) -> bool:
        with self._lock:
            if not self._finished:
                self._callbacks.append(callback)
                return True
        return False

    def is_active(self) -> bool:
        return not self._finished

    def defer_throttle(self, throttle_ms: int) -> bool:
        """Throttle by muting the connection after the answer (KIP-219), when the transport
        does; False: the answer is to be held back instead."""
        return self._defer_throttle is not None and self._defer_throttle(throttle_ms)

    def finish(self) -> None:
        with self._lock:
            self._finished = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
