"""Where a consumer's position comes from when it has none, and what an OFFSET_OUT_OF_RANGE
answer does to one (Kafka's SubscriptionState resets, and its position validation, KIP-320,
in spirit).

- No position (no committed offset): `auto_offset_reset` — earliest, latest, or none
  (NoOffsetForPartitionError).
- OFFSET_OUT_OF_RANGE: believed only when the partition's leader, asked again, confirms it.
  Inside the leader's [log start, high watermark] the position is kept and fetched again
  (logged: some replica answered for a log that is not the leader's); outside it, the policy
  applies as above (none: the error is raised). A retriable failure of that check keeps the
  position, so the fetch, and the check, repeat.
- A retriable failure of the reset's own lookup (LEADER_NOT_AVAILABLE, ...) leaves the
  partitions without a position, and is asked again after `retry_backoff_s`; `poll` does not
  raise it.
"""

from __future__ import annotations

import logging
import time

from ..errors import OffsetOutOfRangeError, SeglogError
from .fetcher import Fetcher
from .gateway import EARLIEST, LATEST, GatewayClient, leader_range, partition_offsets
from .structs import TopicPartition

logger = logging.getLogger(__name__)

DEFAULT_RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """No committed offset and `auto_offset_reset` is none."""


class PositionResets:
    def __init__(
        self,
        fetcher: Fetcher,
        client: GatewayClient,
        policy: str,
        retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S,
    ) -> None:
        self.fetcher = fetcher
        self.client = client
        self.policy = policy
        self.retry_backoff_s = retry_backoff_s
        self._retry_at = 0.0  # monotonic: no reset is asked before (a retriable failure)

    def reset(self, partitions: list[TopicPartition]) -> None:
        """Positions for partitions that have none, by the policy."""
        if self.policy == "none":
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
            raise NoOffsetForPartitionError(
                f"no committed offset for {names} and auto_offset_reset is none"
            )
        if time.monotonic() < self._retry_at:
            return
        target = EARLIEST if self.policy == "earliest" else LATEST
        try:
            found = partition_offsets(self.client, dict.fromkeys(partitions, target))
        except SeglogError as exc:
            if not exc.retriable:
                raise
            # As Kafka's consumer: the partitions stay without a position, and the lookup is
            # asked again after the backoff (a leader moving, a node coming back).
            logger.info("position reset for %d partitions postponed: %s", len(partitions), exc)
            self._retry_at = time.monotonic() + self.retry_backoff_s
            return
        for tp, (offset, _) in found.items():
            logger.info("%s-%d: position reset to %s offset %d", *tp, self.policy, offset)
            self.fetcher.seek(tp, offset)

    def out_of_range(self, tp: TopicPartition, error: OffsetOutOfRangeError) -> bool:
        """Handle an OFFSET_OUT_OF_RANGE answer; False when it is to be raised (policy
        none, and the leader confirms it)."""
        position = self.fetcher.positions().get(tp)
        if position is not None:
            try:
                earliest, latest = leader_range(self.client, tp)
            except SeglogError as exc:
                if not exc.retriable:
                    raise
                logger.info("%s-%d: OFFSET_OUT_OF_RANGE not confirmed yet: %s", *tp, exc)
                self.fetcher.seek(tp, position)
                return True
            if earliest <= position <= latest:
                logger.warning(
                    "%s-%d: a fetch at position %d was answered OFFSET_OUT_OF_RANGE (%s), but "
                    "the leader holds [%d, %d]: fetching again from there",
                    *tp,
                    position,
                    error,
                    earliest,
                    latest,
                )
                self.fetcher.seek(tp, position)
                return True
        if self.policy == "none":
            return False
        self.reset([tp])
        return True
