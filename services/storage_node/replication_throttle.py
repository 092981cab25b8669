"""The replication throttle of a reassignment (Kafka's follower.replication.throttled.rate,
applied to the replicas a move adds until they are in sync, KIP-455): the bytes an adding
replica copies from its leader are charged to one node-wide budget refilled at the move's
bytes/s, and while the budget is spent the throttled partitions sit out of the fetch session
(the fetcher backs them off until it refills), so a move's catch-up cannot take the
replication bandwidth that the in-sync replicas of the clients' partitions need. Partitions
at rest are never charged.
"""

from __future__ import annotations

import threading
import time

# A throttled partition asks for at most this fraction of a second's budget per round, so
# the copy advances in small steps rather than a burst and a long pause.
ROUND_SHARE_OF_RATE = 0.25
MIN_ROUND_BYTES = 64 * 1024  # still room for a whole producer batch
# A debt this short is carried rather than waited out: sitting out of the session costs a
# whole long-poll round, and a replica that has caught up copies a few records per round, so
# waiting each one out would keep it forever a round behind the high watermark (never in
# sync). The average rate still holds: the debt is paid once it grows past this.
CARRIED_DEBT_S = 0.05


class ReplicationThrottle:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refilled_at = 0.0  # time.monotonic() when the bytes charged so far are paid
        self.throttled_bytes = 0  # charged since the node started (tests and measurements)

    def charge(self, size_bytes: int, rate_bytes_per_s: int) -> float:
        """Charge `size_bytes` copied at `rate_bytes_per_s`; seconds to sit out before the
        next fetch (0: fetch on)."""
        now = time.monotonic()
        with self._lock:
            self.throttled_bytes += size_bytes
            self._refilled_at = max(self._refilled_at, now) + size_bytes / rate_bytes_per_s
            return self._wait_s(now)

    def wait_s(self) -> float:
        """Seconds a throttled partition must still sit out (0: it may fetch)."""
        with self._lock:
            return self._wait_s(time.monotonic())

    def _wait_s(self, now: float) -> float:
        debt_s = self._refilled_at - now
        return debt_s if debt_s > CARRIED_DEBT_S else 0.0


def round_max_bytes(rate_bytes_per_s: int, replica_fetch_max_bytes: int) -> int:
    return min(
        replica_fetch_max_bytes,
        max(int(rate_bytes_per_s * ROUND_SHARE_OF_RATE), MIN_ROUND_BYTES),
    )
