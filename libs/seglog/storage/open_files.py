"""OpenFileCache: a node-wide bound on the descriptors beyond the active segments' `.log`s.

An active segment keeps its `.log` open (every append writes it). An old segment's `.log`,
and the descriptor an index writes through, are opened when needed and stay open while they
are among the `capacity` most recently used such files of the node; past that the least
recently used is closed, and opened again by path on its next use. A partition with a
hundred segments then holds one descriptor, not a hundred, and a node's descriptors are one
per hosted partition plus at most `capacity` (a hard limit of 20,000 fits 10,000 partitions
with room).

A file is closed only when no one uses its descriptor: every use (a pread, the dup that a
sendfile transfer works from, a truncate) pins the file (`Parkable.pin`), and a pinned file
is skipped; it is offered again when its last pin goes. A closed descriptor number can be
reused by any other open in the process, so an unpinned use could read another file: the
pin is not an optimisation.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

# Old segments' files held open at once, node-wide: enough for every consumer and follower
# reading behind the log end on a busy node to find its segment open (each reader touches one
# old segment at a time), a small fraction of a 20,000 descriptor limit.
DEFAULT_CAPACITY = 1024


class Parkable(Protocol):
    def park(self) -> bool:
        """Close the descriptor unless it is pinned; True when closed (or already)."""
        ...


class OpenFileCache:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity {capacity} must be at least 1")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[int, Parkable] = OrderedDict()  # least recently used first
        self.closed_count = 0  # files closed for idleness, for tests and metrics

    def __len__(self) -> int:
        return len(self._open)

    def used(self, file: Parkable) -> None:
        """`file` has an open descriptor and was just used: most recent; close the least
        recently used files beyond the capacity. Called with no lock of the file held (a
        file's lock is taken inside `park`: the other order would deadlock)."""
        with self._lock:
            self._open[id(file)] = file
            self._open.move_to_end(id(file))
            excess = len(self._open) - self.capacity
            victims = [self._open.popitem(last=False)[1] for _ in range(max(excess, 0))]
        for victim in victims:
            if victim.park():
                self.closed_count += 1
            # A pinned victim is offered again (`used`) when its last pin goes.

    def forget(self, file: Parkable) -> None:
        """`file` is closed for good, or became active (kept open by its segment)."""
        with self._lock:
            self._open.pop(id(file), None)

    def close_idle(self) -> int:
        """Close every unpinned file now (tests; a node short of descriptors)."""
        with self._lock:
            files = list(self._open.values())
            self._open.clear()
        closed = sum(1 for f in files if f.park())
        self.closed_count += closed
        return closed


# One node is one process: its logs share one cache.
SHARED = OpenFileCache()
