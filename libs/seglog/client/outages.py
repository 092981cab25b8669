"""Retrying through an outage without flooding the log: exponential back-off between attempts
(Kafka's retry.backoff.ms doubling up to retry.backoff.max.ms, KIP-580, with its ±20 % jitter)
and one log line when the outage starts, when its cause changes, as a reminder at most every
`remind_after_s`, and when it ends.

A producer against a stopped cluster logged its failed metadata refresh 1,232 times in 2.5
minutes; a consumer following a deleted topic logged nothing at all. Both now say it once.
"""

from __future__ import annotations

import logging
import random
import threading
import time

_JITTER = 0.2


class OutageLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        backoff_ms: int,
        backoff_max_ms: int,
        remind_after_s: float = 60.0,
    ) -> None:
        self._logger = logger
        self._what = what
        self._backoff_s = backoff_ms / 1000
        self._backoff_max_s = max(backoff_ms, backoff_max_ms) / 1000
        self._remind_after_s = remind_after_s
        self._lock = threading.Lock()
        self._failures = 0
        self._since_s = 0.0
        self._cause = ""
        self._logged_at_s = 0.0

    @property
    def failing(self) -> bool:
        return self._failures > 0

    def failed(self, error: object, key: str | None = None) -> float:
        """Record a failed attempt; returns how long to wait before the next one (seconds).
        `key` names the cause when the error's text varies from attempt to attempt."""
        cause = str(error) if key is None else key
        now = time.monotonic()
        with self._lock:
            self._failures += 1
            failures = self._failures
            if failures == 1:
                self._since_s = now
            changed = cause != self._cause
            remind = now - self._logged_at_s >= self._remind_after_s
            if changed or remind:
                self._cause = cause
                self._logged_at_s = now
            since_s = now - self._since_s
        if failures == 1:
            self._logger.warning("%s failed, retrying with back-off: %s", self._what, error)
        elif changed or remind:
            self._logger.warning(
                "%s still failing after %.0f s (%d attempts): %s",
                self._what,
                since_s,
                failures,
                error,
            )
        else:
            self._logger.debug("%s failed (attempt %d): %s", self._what, failures, error)
        return self.delay_s(failures)

    def succeeded(self) -> None:
        with self._lock:
            failures, self._failures = self._failures, 0
            since_s = time.monotonic() - self._since_s
            self._cause = ""
        if failures:
            self._logger.info(
                "%s succeeded again after %.1f s and %d failed attempts",
                self._what,
                since_s,
                failures,
            )

    def delay_s(self, failures: int) -> float:
        """The wait after the `failures`-th failure in a row."""
        if failures <= 0 or self._backoff_s <= 0:
            return self._backoff_s
        exponential: float = self._backoff_s * 2.0 ** min(failures - 1, 32)
        jitter = 1 + random.uniform(-_JITTER, _JITTER)
        return min(exponential, self._backoff_max_s) * jitter
