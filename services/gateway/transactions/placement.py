"""Which transactional ids this gateway coordinates, and their states once read back.

A transactional id belongs to one partition of `__transaction_state` (log_formats.py), and
each partition to one coordinating gateway, placed as group coordinators are
(coordination/group_coordinators.py, keys `txn_coordinators/<n>`; one gateway coordinates
all on the file backend). The first use of a partition on its coordinator reads it back
(txn_log.py); what it holds in a Prepare state is handed to `resume` so its markers are
written (the transaction completes or aborts, never half). Losing a partition forgets it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from seglog.errors import CoordinatorNotAvailableError, NotCoordinatorError, SeglogError

from ..coordination.group_coordinators import EtcdCoordination, SoleCoordinator
from .state import TransactionMetadata, TxnState
from .txn_log import TRANSACTION_STATE_TOPIC, TransactionLog

Transactions = dict[str, TransactionMetadata]


class TransactionPlacement:
    def __init__(
        self,
        log: TransactionLog,
        coordination: EtcdCoordination | SoleCoordinator,
        resume: Callable[[TransactionMetadata, int], None],
    ) -> None:
        self.log = log
        self.coordination = coordination
        self._resume = resume
        self._lock = threading.Lock()
        self._locks: dict[int, threading.RLock] = {}
        self._loaded: dict[int, Transactions] = {}
        if isinstance(coordination, EtcdCoordination):
            coordination.gained.append(self.forget)
            coordination.lost.append(self.forget)

    @property
    def address(self) -> str:
        return str(getattr(self.coordination, "address", ""))

    def lock(self, partition: int) -> threading.RLock:
        """Held across a transaction's check, log write and change: one change at a time per
        log partition, in log order."""
        with self._lock:
            return self._locks.setdefault(partition, threading.RLock())

    def forget(self, partition: int) -> None:
        with self.lock(partition):
            self._loaded.pop(partition, None)

    def coordinator_address(self, transactional_id: str) -> str:
        """The coordinating gateway's address ("" for this one); raises why none."""
        if isinstance(self.coordination, SoleCoordinator):
            return ""
        partition = self.log.partition_for(transactional_id)
        try:
            owner = self.coordination.coordinator_of(partition)
        except SeglogError as exc:
            raise CoordinatorNotAvailableError(
                f"no coordinator for transactional id {transactional_id!r}: {exc}"
            ) from None
        if owner == self.coordination.address:
            return ""
        if not owner:
            raise CoordinatorNotAvailableError(
                f"no gateway coordinates transactional id {transactional_id!r} yet"
            )
        return owner

    def check_here(self, transactional_id: str) -> int:
        """The id's log partition, once known to be coordinated here (NotCoordinatorError
        naming the coordinator otherwise)."""
        owner = self.coordinator_address(transactional_id)
        if owner:
            raise NotCoordinatorError(
                f"transactional id {transactional_id!r} is coordinated by the gateway at {owner}",
                coordinator=owner,
            )
        return self.log.partition_for(transactional_id)

    def transactions(self, partition: int) -> Transactions:
        """The partition's transactions, read back on first use (hold `lock(partition)`)."""
        loaded = self._loaded.get(partition)
        if loaded is not None:
            return loaded
        self.log.ensure_topic()
        read = self.log.load(partition)
        loaded = {
            tid: TransactionMetadata.from_log(tid, value)
            for tid, value in read.items()
            if value is not None and value.status != TxnState.DEAD
        }
        self._loaded[partition] = loaded
        epoch = self.log.coordinator_epoch(partition)
        for metadata in loaded.values():
            if metadata.state.completing:
                self._resume(metadata, epoch)
        return loaded

    def loaded_partitions(self) -> dict[int, Transactions]:
        with self._lock:
            return dict(self._loaded)

    def owned_partitions(self) -> list[int]:
        """The log partitions this gateway coordinates now (all on the file backend)."""
        if TRANSACTION_STATE_TOPIC not in self.log.registry.topics:
            return []  # no transaction yet (and a listing does not create the topic)
        count = self.log.num_partitions
        if isinstance(self.coordination, SoleCoordinator):
            return list(range(count))
        return [p for p in range(count) if self.coordination.owner(p) == self.coordination.address]
