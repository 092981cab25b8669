"""Memory for inflating compressed batches while they are checked, bounded per process.

Each compressed batch a server accepts is decompressed whole to check its records
(checks.py), up to `max.uncompressed.batch.bytes` (64 MiB) each. That bound is per batch: 16
concurrent 61 KB gzip bombs once took a node from 272 MB to 3.4 GB. This budget bounds the
sum over every batch being inflated in the process at once, as Kafka's memory pool bounds
`queued.max.request.bytes`.

A check reserves memory step by step as its output grows (the codecs inflate in steps of at
most 1 MiB; each step counts 1.25 times its output, for the buffer's headroom and the step's
own piece) and gives it all back when the check ends. Only a check that holds nothing yet
waits for room (up to `first_step_wait_s`); a check that already holds memory and finds no
room fails at once with a retriable error and releases what it held. So no check waits while
holding memory (no check can starve another into a deadlock), legitimate small batches wait
behind a burst of large ones only until those finish or fail, and the sum never passes the
limit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import RequestTimedOutError

DEFAULT_LIMIT_BYTES = 256 * 1024 * 1024
DEFAULT_FIRST_STEP_WAIT_S = 10.0

Grow = Callable[[int], None]


def unlimited(nbytes: int) -> None:
    """A `Grow` for inflation nothing bounds (a client reading checked batches)."""


class InflationBudget:
    def __init__(
        self,
        limit_bytes: int = DEFAULT_LIMIT_BYTES,
        first_step_wait_s: float = DEFAULT_FIRST_STEP_WAIT_S,
    ) -> None:
        self.limit_bytes = limit_bytes
        self.first_step_wait_s = first_step_wait_s
        self.used_bytes = 0
        self.peak_bytes = 0
        self.refused = 0
        self._room = threading.Condition()

    @contextmanager
    def reservation(self) -> Iterator[Grow]:
        """A `grow(nbytes)` that reserves before each step of output; everything it reserved
        is released when the block ends."""
        held = 0

        def grow(output_bytes: int) -> None:
            nonlocal held
            # A step occupies more than its output: the growing buffer keeps headroom (an
            # eighth) and the step's own piece lives until it is appended.
            nbytes = output_bytes + output_bytes // 4
            with self._room:
                if self.used_bytes + nbytes > self.limit_bytes:
                    if held:
                        self.refused += 1
                        raise RequestTimedOutError(
                            f"the {self.limit_bytes}-byte budget for decompressing batches is "
                            f"in use by others; retry"
                        )
                    self._wait_for_room(nbytes)
                self.used_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.used_bytes)
                held += nbytes

        try:
            yield grow
        finally:
            if held:
                with self._room:
                    self.used_bytes -= held
                    self._room.notify_all()

    def _wait_for_room(self, nbytes: int) -> None:
        deadline = time.monotonic() + self.first_step_wait_s
        while self.used_bytes + nbytes > self.limit_bytes:
            left = deadline - time.monotonic()
            if left <= 0 or nbytes > self.limit_bytes:
                self.refused += 1
                raise RequestTimedOutError(
                    f"no room in the {self.limit_bytes}-byte budget for decompressing batches "
                    f"within {self.first_step_wait_s:g} s; retry"
                )
            self._room.wait(left)


# One per process: a storage node's appends share it (the node sets its limit at start).
PROCESS_BUDGET = InflationBudget()


# glibc's mallopt parameter M_MMAP_THRESHOLD.
_M_MMAP_THRESHOLD = -3
LARGE_ALLOCATION_BYTES = 4 * 1024 * 1024


def return_large_buffers_to_the_system() -> bool:
    """Serve every allocation of 4 MiB or more with its own mapping (glibc's mallopt), so a
    large buffer grows by remapping rather than copying and its memory goes back to the system
    when freed. Left alone, glibc raises that threshold after the first large free (up to 32
    MiB), and then each thread's arena keeps the inflated batches it freed: 16 bombs took a
    node to 930 MB of resident memory under a 256 MiB budget. False where libc has no mallopt
    (not glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, LARGE_ALLOCATION_BYTES))
