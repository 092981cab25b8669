"""Waiting for a condition with a deadline, the one way tests wait (never a fixed sleep):
`wait_until` answers whether the condition came true in time, for tests that assert on it
or take another path; `wait_for` raises TimeoutError naming what it waited for (and, when
given, the state it saw last), for helpers whose callers cannot go on without it."""

from __future__ import annotations

import time
from collections.abc import Callable

# Short enough that a test goes on soon after its condition holds, long enough that a
# predicate asking a server over gRPC does not keep a core busy.
POLL_INTERVAL_S = 0.02
# wait_for's conditions ask a whole cluster of processes at once (who leads, healed?).
CLUSTER_POLL_INTERVAL_S = 0.05


def wait_until(
    predicate: Callable[[], object], timeout_s: float = 15.0, interval_s: float = POLL_INTERVAL_S
) -> bool:
    """True as soon as `predicate()` is; False if it still is not at the deadline (asked one
    last time then, so a slow machine's last poll is not lost)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def wait_for(
    predicate: Callable[[], object],
    timeout_s: float,
    what: str,
    state: Callable[[], str] | None = None,
    interval_s: float = CLUSTER_POLL_INTERVAL_S,
) -> None:
    """Return once `predicate()` is true; TimeoutError naming `what` (and `state()`, when
    given) if it is not by the deadline."""
    if wait_until(predicate, timeout_s, interval_s):
        return
    seen = f"; state: {state()}" if state is not None else ""
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}{seen}")
