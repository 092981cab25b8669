"""The transactional producer's side of Kafka's transactions (its TransactionManager), over
seglog's TransactionCoordinator service (proto/seglog/v1/transactions.proto).

States, as Kafka's producer has them:

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit/abort_transaction--> READY
    IN_TRANSACTION --a batch or a call failed--> ABORTABLE (only abort_transaction leaves it)
    any --PRODUCER_FENCED / INVALID_PRODUCER_EPOCH / authorization--> FATAL (the producer is
        unusable: every transactional call raises the error that made it so; close it)

The sender adds each partition to the transaction (AddPartitionsToTxn) before the first batch
for it goes out and stamps its batches transactional with the producer's id and epoch, as
Kafka's sender does. Calls go to the transactional id's coordinator (FindCoordinator, then
NOT_COORDINATOR's redirect); retriable refusals (the coordinator loading or moving, the
previous transaction still completing: CONCURRENT_TRANSACTIONS) are retried with back-off
until the call's deadline.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc

from ..coordinator_errors import ProducerFencedError
from ..errors import (
    AuthenticationError,
    InvalidProducerEpochError,
    NotCoordinatorError,
    PermissionDeniedError,
    SeglogError,
)
from ..rpc.status import error_from_code, error_from_rpc
from ..v1 import transactions_pb2 as pb
from ..v1 import transactions_pb2_grpc
from .config import ProducerConfig
from .structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

_FIND_TIMEOUT_S = 10.0
_FIRST_RETRY_S = 0.005
# Errors after which the producer can never go on (Kafka's fatal errors).
_FATAL = (
    ProducerFencedError,
    InvalidProducerEpochError,
    PermissionDeniedError,
    AuthenticationError,
)


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ABORTABLE = "abortable error"
    FATAL = "fatal error"


class TransactionStateError(SeglogError):
    """A transactional call the producer's state does not allow (begin twice, commit with no
    transaction, commit after a failed send: abort instead)."""

    reason = "INVALID_TXN_STATE"


class TxnCoordinatorCalls:
    """Calls of the TransactionCoordinator service sent to the gateway coordinating their key
    (a transactional id, or a group for TxnOffsetCommit); retriable errors retried until the
    deadline."""

    def __init__(
        self,
        bootstrap: grpc.Channel,
        open_channel: Callable[[str], grpc.Channel],
        retry_backoff_s: float = 0.1,
    ) -> None:
        self._bootstrap = transactions_pb2_grpc.TransactionCoordinatorStub(bootstrap)
        self.bootstrap = self._bootstrap  # for calls about no key (ListTransactions)
        self._open_channel = open_channel
        self._retry_backoff_s = retry_backoff_s
        self._lock = threading.Lock()
        self._coordinators: dict[tuple[str, int], str] = {}
        self._stubs: dict[str, transactions_pb2_grpc.TransactionCoordinatorStub] = {}

    def _stub(self, address: str) -> transactions_pb2_grpc.TransactionCoordinatorStub:
        if not address:
            return self._bootstrap
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                stub = self._stubs[address] = transactions_pb2_grpc.TransactionCoordinatorStub(
                    self._open_channel(address)
                )
            return stub

    def _coordinator(self, key: str, key_type: int, timeout_s: float) -> str:
        with self._lock:
            known = self._coordinators.get((key, key_type))
        if known is not None:
            return known
        found = self._bootstrap.FindCoordinator(
            pb.FindTxnCoordinatorRequest(key=key, key_type=key_type),  # type: ignore[arg-type]
            timeout=min(timeout_s, _FIND_TIMEOUT_S),
        )
        with self._lock:
            self._coordinators[(key, key_type)] = found.address
        return str(found.address)

    def call(self, key: str, key_type: int, method: str, request: Any, deadline_s: float) -> Any:
        """The call's answer from the key's coordinator; its error raised typed."""
        # The previous transaction still completing (CONCURRENT_TRANSACTIONS) is a matter of
        # milliseconds: its markers are being written. Retries start short and double up to
        # the back-off, as Kafka's producer retries AddPartitionsToTxn after 20 ms.
        backoff_s = _FIRST_RETRY_S
        while True:
            remaining_s = deadline_s - time.monotonic()
            try:
                address = self._coordinator(key, key_type, max(remaining_s, 0.001))
                return getattr(self._stub(address), method)(
                    request, timeout=max(remaining_s, 0.001)
                )
            except grpc.RpcError as exc:
                error = error_from_rpc(exc)
            with self._lock:
                if isinstance(error, NotCoordinatorError) and error.coordinator:
                    self._coordinators[(key, key_type)] = str(error.coordinator)
                else:
                    self._coordinators.pop((key, key_type), None)
            if not error.retriable and not isinstance(error, NotCoordinatorError):
                raise error
            wait_s = min(backoff_s, deadline_s - time.monotonic())
            backoff_s = min(backoff_s * 2, self._retry_backoff_s)
            if wait_s <= 0:
                raise error
            time.sleep(wait_s)


def transaction_manager(
    calls: TxnCoordinatorCalls, config: ProducerConfig
) -> TransactionManager | None:
    """The producer's transaction manager, when it has a transactional id."""
    if config.transactional_id is None:
        return None
    return TransactionManager(
        calls, config.transactional_id, config.transaction_timeout_ms, config.max_block_ms
    )


class TransactionManager:
    def __init__(
        self,
        calls: TxnCoordinatorCalls,
        transactional_id: str,
        transaction_timeout_ms: int,
        max_block_ms: int,
    ) -> None:
        self.calls = calls
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.max_block_s = max_block_ms / 1000
        self._lock = threading.Lock()
        self.state = TxnState.UNINITIALIZED
        self._producer: tuple[int, int] | None = None
        self._partitions: set[tuple[str, int]] = set()  # added to the open transaction
        self._added = False  # the coordinator has the transaction (partitions or offsets)
        self._error: SeglogError | None = None  # what made the state ABORTABLE or FATAL

    # -- what the sender reads --------------------------------------------------------------

    @property
    def producer(self) -> tuple[int, int] | None:
        """(producer id, epoch) once init_transactions succeeded."""
        return self._producer

    def add_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Add the partitions not yet in the open transaction (the sender, before their first
        batch goes out). Raises why not: the batches then fail with it."""
        with self._lock:
            self._check_usable()
            if self.state is not TxnState.IN_TRANSACTION:
                raise TransactionStateError(
                    f"a transactional send outside a transaction ({self.state.value}): "
                    f"call begin_transaction() first"
                )
            new = sorted(set(partitions) - self._partitions)
            if not new:
                return
            by_topic: dict[str, list[int]] = {}
            for topic, partition in new:
                by_topic.setdefault(topic, []).append(partition)
            request = pb.TxnAddPartitionsRequest(
                producer=self._producer_message(),
                topics=[
                    pb.TxnTopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()
                ],
            )
            self._coordinator_call("AddPartitionsToTxn", request, self._timeout(None))
            self._partitions.update(new)
            self._added = True

    def batch_failed(self, error: BaseException) -> None:
        """A transactional batch failed for good: the transaction can only be aborted (or the
        producer is done, when it was fenced)."""
        with self._lock:
            self._failed(error if isinstance(error, SeglogError) else SeglogError(str(error)))

    # -- the producer's calls --------------------------------------------------------------

    def init_transactions(self, timeout_s: float | None) -> None:
        with self._lock:
            self._check_usable()
            if self.state not in (TxnState.UNINITIALIZED, TxnState.READY):
                raise TransactionStateError(f"init_transactions while {self.state.value}")
            self._init(self._timeout(timeout_s))

    def _init(self, deadline_s: float) -> None:
        pid, epoch = self._producer or (-1, -1)
        request = pb.TxnInitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.transaction_timeout_ms,
            producer_id=pid,
            producer_epoch=epoch,
        )
        answer = self._coordinator_call("InitProducerId", request, deadline_s)
        self._producer = (answer.producer_id, answer.producer_epoch)
        self.state = TxnState.READY

    def begin_transaction(self) -> None:
        with self._lock:
            self._check_usable()
            if self.state is not TxnState.READY:
                raise TransactionStateError(
                    f"begin_transaction while {self.state.value}"
                    + (" (call init_transactions first)" if self._producer is None else "")
                )
            self._partitions = set()
            self.state = TxnState.IN_TRANSACTION

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group: ConsumerGroupMetadata | str,
        timeout_s: float | None,
    ) -> None:
        """AddOffsetsToTxn to the transaction's coordinator, then TxnOffsetCommit to the
        group's: the offsets count once the transaction commits."""
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group)
        deadline_s = self._timeout(timeout_s)
        with self._lock:
            self._check_in_transaction("send_offsets_to_transaction")
            add = pb.TxnAddOffsetsRequest(
                producer=self._producer_message(), group_id=group.group_id
            )
            self._coordinator_call("AddOffsetsToTxn", add, deadline_s)
            self._added = True
            commit = pb.TxnOffsetCommitRequest(
                producer=self._producer_message(),
                group_id=group.group_id,
                generation_id=group.generation_id,
                member_id=group.member_id,
            )
            for tp, value in offsets.items():
                o = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
                commit.offsets.add(
                    topic=tp[0],
                    partition=tp[1],
                    offset=o.offset,
                    leader_epoch=o.leader_epoch,
                    metadata=o.metadata,
                )
            try:
                answer = self.calls.call(
                    group.group_id, pb.TXN_KEY_GROUP, "TxnOffsetCommit", commit, deadline_s
                )
            except SeglogError as exc:
                self._failed(exc)
                raise
            for code, message in zip(answer.errors, answer.error_messages, strict=True):
                if code:
                    error = error_from_code(code, message)
                    self._failed(error)
                    raise error

    def end_transaction(
        self, committed: bool, flush: Callable[[float | None], None], timeout_s: float | None
    ) -> None:
        """Send what is queued, then commit (every batch written) or abort."""
        verb = "commit_transaction" if committed else "abort_transaction"
        with self._lock:
            self._check_usable()
            if self.state is TxnState.ABORTABLE and committed:
                raise TransactionStateError(
                    f"cannot commit: the transaction failed ({self._error}); abort it"
                )
            if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE):
                raise TransactionStateError(f"{verb} with no transaction ({self.state.value})")
        # Outside the lock: the sender adds partitions under it while the flush waits.
        flush(timeout_s)
        with self._lock:
            self._check_usable()
            if self.state is TxnState.ABORTABLE and committed:
                raise TransactionStateError(
                    f"cannot commit: a send failed ({self._error}); abort the transaction"
                )
            failed = self.state is TxnState.ABORTABLE
            if self._added:  # Kafka's producer sends no EndTxn for a transaction of nothing
                request = pb.TxnEndRequest(producer=self._producer_message(), committed=committed)
                self._coordinator_call("EndTxn", request, self._timeout(timeout_s))
            self._partitions, self._added, self._error = set(), False, None
            self.state = TxnState.READY
            if failed:
                # A failed batch left its partition's sequence unknown: the epoch is bumped
                # (KIP-360, the producer's own id and epoch) and sequences start again.
                self._init(self._timeout(timeout_s))

    # -- inside -----------------------------------------------------------------------------

    def _timeout(self, timeout_s: float | None) -> float:
        return time.monotonic() + (self.max_block_s if timeout_s is None else timeout_s)

    def _producer_message(self) -> pb.TxnProducer:
        assert self._producer is not None
        return pb.TxnProducer(
            transactional_id=self.transactional_id,
            producer_id=self._producer[0],
            producer_epoch=self._producer[1],
        )

    def _coordinator_call(self, method: str, request: Any, deadline_s: float) -> Any:
        try:
            return self.calls.call(
                self.transactional_id, pb.TXN_KEY_TRANSACTION, method, request, deadline_s
            )
        except SeglogError as exc:
            if method != "InitProducerId" or isinstance(exc, _FATAL):
                self._failed(exc)
            raise

    def _failed(self, error: SeglogError) -> None:
        if isinstance(error, _FATAL):
            self.state, self._error = TxnState.FATAL, error
        elif self.state is TxnState.IN_TRANSACTION:
            self.state, self._error = TxnState.ABORTABLE, error

    def _check_usable(self) -> None:
        if self.state is TxnState.FATAL:
            assert self._error is not None
            raise type(self._error)(
                f"the producer cannot go on (close it and make a new one): {self._error}"
            )

    def _check_in_transaction(self, call: str) -> None:
        self._check_usable()
        if self.state is not TxnState.IN_TRANSACTION:
            raise TransactionStateError(f"{call} while {self.state.value}")
