"""A bound on calls that wait (long-poll fetches, group joins) on a server whose thread pool
is shared with every other call: beyond the bound a call answers at once instead of waiting,
so appends, heartbeats and health checks always find a thread."""

from __future__ import annotations

import threading

# The servers' thread pool (serving.build_server): waiting calls may take half of it.
SERVER_MAX_WORKERS = 32
DEFAULT_MAX_WAITING_CALLS = SERVER_MAX_WORKERS // 2


class WaitSlots:
    def __init__(self, limit: int = DEFAULT_MAX_WAITING_CALLS) -> None:
        self.limit = limit
        self._in_use = 0
        self._lock = threading.Lock()

    def try_acquire(self) -> bool:
        with self._lock:
            if self._in_use >= self.limit:
                return False
            self._in_use += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._in_use -= 1

    @property
    def in_use(self) -> int:
        return self._in_use


class PeerWaitSlots:
    """WaitSlots counted per peer (a connection's address): one client cannot take a bound's
    every slot."""

    def __init__(self, limit_per_peer: int) -> None:
        self.limit_per_peer = limit_per_peer
        self._in_use: dict[str, int] = {}
        self._lock = threading.Lock()

    def try_acquire(self, peer: str) -> bool:
        with self._lock:
            held = self._in_use.get(peer, 0)
            if held >= self.limit_per_peer:
                return False
            self._in_use[peer] = held + 1
            return True

    def release(self, peer: str) -> None:
        with self._lock:
            held = self._in_use.pop(peer) - 1
            if held:
                self._in_use[peer] = held
