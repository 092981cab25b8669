"""What the metadata applier says of a large batch of partition states (one of at least
LARGE_BATCH_PARTITIONS): when it starts, every PROGRESS_LOG_INTERVAL_S while it runs, and
when it ends, so an operator creating thousands of partitions sees the node at work."""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("services.storage_node.metadata_applier")

LARGE_BATCH_PARTITIONS = 500
PROGRESS_LOG_INTERVAL_S = 5.0


class ApplyProgress:
    def __init__(self) -> None:
        self._started: float | None = None
        self._logged = 0.0
        self.applied = 0  # partition states applied in the batch under way

    def note_pending(self, pending: int, step_partitions: int) -> None:
        """New submissions merged: a batch begins when enough is pending."""
        if self._started is None and pending >= LARGE_BATCH_PARTITIONS:
            self._started = self._logged = time.monotonic()
            self.applied = 0
            logger.info("applying %d partition states in steps of %d", pending, step_partitions)

    def log(self, pending: int) -> None:
        if self._started is None:
            return
        now = time.monotonic()
        if now - self._logged >= PROGRESS_LOG_INTERVAL_S:
            self._logged = now
            logger.info("applied %d partition states, %d to go", self.applied, pending)

    def finish(self) -> None:
        if self._started is None:
            return
        logger.info(
            "applied %d partition states in %.1f s", self.applied, time.monotonic() - self._started
        )
        self._started = None
