"""A transactional id's state, as Kafka's TransactionMetadata keeps it, and the states' ids as
`__transaction_state` stores them (Kafka's TransactionState).

    Empty ──AddPartitions──▶ Ongoing ──EndTxn──▶ PrepareCommit ──markers──▶ CompleteCommit
                                │                PrepareAbort  ──markers──▶ CompleteAbort
                                └─InitProducerId / timeout─▶ PrepareEpochFence: the epoch
                                  bumped and PrepareAbort logged, as Kafka does

A Complete state is where the next transaction starts (as Empty). Prepare states are
written before their markers, so a coordinator that loads one resumes them: the transaction
completes or aborts, never half.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .log_formats import TopicPartition, TxnLogValue


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """As DescribeTransactions/ListTransactions name it (Kafka's TransactionState.name)."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    @property
    def completing(self) -> bool:
        return self in PREPARING

    @property
    def settled(self) -> bool:
        """No transaction in progress: a new one may start, InitProducerId may bump."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


PREPARING = frozenset(
    {TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE}
)
BY_KAFKA_NAME = {state.kafka_name: state for state in TxnState}


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    # Groups whose __consumer_offsets partition AddOffsetsToTxn put in the transaction (their
    # pending offsets complete with the marker); kept in memory, as the partition is logged.
    groups: set[str] = field(default_factory=set)
    # The epoch before the last InitProducerId bump (Kafka's lastProducerEpoch, in memory):
    # a producer retrying that call with it is answered the current epoch, not fenced.
    last_producer_epoch: int = -1

    def log_value(self, state: TxnState | None = None) -> TxnLogValue:
        # PrepareEpochFence is an in-memory state: Kafka logs it as PrepareAbort.
        logged = self.state if state is None else state
        if logged is TxnState.PREPARE_EPOCH_FENCE:
            logged = TxnState.PREPARE_ABORT
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(logged),
            frozenset(self.partitions),
            self.last_update_ms,
            self.start_ms,
        )

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> TransactionMetadata:
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            TxnState(value.status),
            set(value.partitions),
            value.start_ms,
            value.last_update_ms,
        )
