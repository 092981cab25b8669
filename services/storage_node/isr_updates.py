"""A leader's ISR changes (Kafka's AlterPartitionManager and isr-expiration task): one thread
sends the proposals partitions make (a caught-up follower to add, found on its fetch) to the
registry, one at a time, and every `replica.lag.time.max.ms / 2` asks each partition for
followers to drop. A change takes effect on the partition only once the registry answered
with the new registration; a refusal or an unreachable registry drops the proposal, and the
partition proposes again when it still applies."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from .partition import IsrProposal, Partition, Registration

logger = logging.getLogger(__name__)

# Sends an ISR proposal to the registry; answers the partition's new registration.
AlterPartition = Callable[[IsrProposal], Registration]


class IsrUpdates:
    def __init__(
        self,
        partition_of: Callable[[str, int], Partition | None],
        partitions: Callable[[], list[Partition]],
        lag_time_max_ms: int,
        on_change: Callable[[str, int], None],
    ) -> None:
        self.partition_of = partition_of
        self.partitions = partitions
        self.lag_time_max_ms = lag_time_max_ms
        self.on_change = on_change  # (topic, partition): its high watermark may have moved
        self.alter_partition: AlterPartition | None = None  # set by the registry session
        # ISR changes the registry accepted, for the metrics (Kafka's IsrShrinksPerSec and
        # IsrExpandsPerSec): written by the one thread that sends proposals.
        self.shrinks = 0
        self.expands = 0
        self._proposals: queue.Queue[IsrProposal | None] = queue.Queue()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="isr", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._proposals.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def propose(self, proposal: IsrProposal) -> None:
        self._proposals.put(proposal)

    def _run(self) -> None:
        period_s = self.lag_time_max_ms / 2000
        next_check = time.monotonic() + period_s
        while not self._stopping:
            try:
                proposal = self._proposals.get(timeout=max(next_check - time.monotonic(), 0))
            except queue.Empty:
                next_check = time.monotonic() + period_s
                for held in self.partitions():
                    shrink = held.shrink_proposal(self.lag_time_max_ms)
                    if shrink is not None:
                        self._send_safely(held, shrink)
                continue
            if proposal is None:
                return
            proposer = self.partition_of(proposal.topic, proposal.partition)
            if proposer is not None:
                self._send_safely(proposer, proposal)

    def _send_safely(self, held: Partition, proposal: IsrProposal) -> None:
        """One proposal whatever happens to it: this thread is the only one that sends
        ISR changes, and a partition with a proposal in flight proposes nothing more, so an
        error here must neither end the thread nor leave the flag set (an idle partition's
        follower would never be proposed again: nothing else clears it)."""
        try:
            self._send(held, proposal)
        except Exception:
            logger.exception(
                "%s-%d: ISR change to %s not completed",
                proposal.topic,
                proposal.partition,
                list(proposal.new_isr),
            )
            held.proposal_failed()

    def _send(self, held: Partition, proposal: IsrProposal) -> None:
        if self.alter_partition is None:
            held.proposal_failed()
            return
        # Measured before the registry answers: its push of the change may reach the
        # partition before this call returns.
        before = len(held.isr)
        try:
            registration = self.alter_partition(proposal)
        except Exception as exc:  # the registry said no, or is unreachable: retry later
            logger.info(
                "AlterPartition %s-%d to ISR %s failed: %s",
                proposal.topic,
                proposal.partition,
                list(proposal.new_isr),
                exc,
            )
            held.proposal_failed()
            return
        logger.info(
            "%s-%d: ISR is now %s", proposal.topic, proposal.partition, list(registration.isr)
        )
        held.apply(registration)
        if len(proposal.new_isr) < before:
            self.shrinks += 1
        elif len(proposal.new_isr) > before:
            self.expands += 1
        held.maybe_increment_high_watermark()
        self.on_change(held.topic, held.partition)
