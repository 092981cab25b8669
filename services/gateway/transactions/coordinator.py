"""The transaction coordinator's state machine (Kafka's TransactionCoordinator), for a
Caller and typed arguments: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, and the produce path's check that a partition is in its producer's
ongoing transaction (KIP-890's verification).

Every change is logged in `__transaction_state` (acks=all) before it is answered or acted on;
one change at a time per log partition (placement.py's lock). EndTxn answers once the
Prepare state is logged; the markers follow (markers.py) and the Complete state after them.
Fencing (InitProducerId of an id with a transaction ongoing, or its timeout) bumps the epoch
and aborts the transaction under the new epoch, so the old producer's writes are refused.

ACLs, as Kafka's broker checks them: Write on the transactional id for every call; Write on
each topic added; Read on the group added by AddOffsetsToTxn; ClusterAction on the cluster for
the brokers' verification (AddPartitionsToTxn v4+).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

from seglog.coordinator_errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from seglog.errors import (
    InvalidGroupIdError,
    InvalidRequestError,
    NotCoordinatorError,
    PermissionDeniedError,
    SeglogError,
    UnknownTopicOrPartitionError,
)

from ..authorization import Authorization
from ..broker.caller import Caller
from ..cluster.registry import Registry
from .completion_waits import NOTHING_PARKED, CompletionPendingError, CompletionWaits
from .log_formats import TopicPartition
from .markers import Completion, MarkerWriter
from .placement import TransactionPlacement
from .state import TransactionMetadata, TxnState

logger = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka bumps to a new producer id before the epoch would reach Short.MAX_VALUE (32767).
MAX_EPOCH = 32767 - 1
OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class TransactionSettings:
    transaction_max_timeout_ms: int = 900_000  # Kafka's transaction.max.timeout.ms
    transaction_state_log_num_partitions: int = 50
    # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000


def settings_from(config: object) -> TransactionSettings:
    """The settings of the same names in the gateway's config (settings.py)."""
    return TransactionSettings(
        **{f.name: getattr(config, f.name) for f in fields(TransactionSettings)}
    )


@dataclass(frozen=True)
class ProducerGrant:
    producer_id: int
    producer_epoch: int


PartitionErrors = dict[TopicPartition, SeglogError | None]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    def __init__(
        self,
        registry: Registry,
        authorization: Authorization,
        placement: TransactionPlacement,
        markers: MarkerWriter,
        allocate_producer_id: Callable[[], int],
        offsets_partition_for: Callable[[str], int],
        settings: TransactionSettings,
        waits: CompletionWaits | None = None,
    ) -> None:
        self.registry = registry
        self.waits = waits
        self.authorization = authorization
        self.placement = placement
        self.markers = markers
        self._allocate = allocate_producer_id
        self._offsets_partition_for = offsets_partition_for
        self.settings = settings

    # -- checks --------------------------------------------------------------------------------

    def _check_id(self, caller: Caller, operation: str, transactional_id: str, api: str) -> None:
        if not transactional_id:
            raise InvalidRequestError(f"{api}: the transactional id is empty")
        self.authorization.check(caller, [(operation, "transactional_id", transactional_id)], api)

    def _current(
        self, transactions: dict[str, TransactionMetadata], tid: str, producer_id: int, epoch: int
    ) -> TransactionMetadata:
        """The id's transaction, once the producer is its current one (Kafka's checks, in
        Kafka's order)."""
        metadata = transactions.get(tid)
        if metadata is None or metadata.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer id {producer_id} is not transactional id {tid!r}'s"
            )
        if metadata.producer_epoch != epoch:
            raise ProducerFencedError(
                f"transactional id {tid!r} has epoch {metadata.producer_epoch}, not {epoch}: "
                f"a newer producer fenced this one"
            )
        return metadata

    def _log(
        self,
        metadata: TransactionMetadata,
        then: dict[str, object] | None = None,
        **changes: object,
    ) -> None:
        """Log the metadata with `changes` applied, then apply them (only once logged);
        `then`, changes after those, logged in the same write and applied too."""
        changed = TransactionMetadata(**{**metadata.__dict__, **changes})
        changed.last_update_ms = _now_ms()
        after = TransactionMetadata(**{**changed.__dict__, **then}) if then else None
        later = after.log_value() if after is not None else None
        self.placement.log.append(changed.transactional_id, changed.log_value(), then=later)
        metadata.__dict__.update((after or changed).__dict__)

    # -- InitProducerId ------------------------------------------------------------------------

    def init_producer_id(
        self,
        caller: Caller,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> ProducerGrant:
        self._check_id(caller, "Write", transactional_id, "InitProducerId")
        if not 0 < timeout_ms <= self.settings.transaction_max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {timeout_ms} is not within 1.."
                f"{self.settings.transaction_max_timeout_ms} (transaction.max.timeout.ms)"
            )
        partition = self.placement.check_here(transactional_id)
        with self.placement.lock(partition):
            transactions = self.placement.transactions(partition)
            metadata = transactions.get(transactional_id)
            if metadata is None:
                metadata = TransactionMetadata(
                    transactional_id, self._allocate(), NO_PRODUCER_EPOCH, timeout_ms
                )
                transactions[transactional_id] = metadata
            if expected_producer_id != NO_PRODUCER_ID and metadata.producer_epoch >= 0:
                # KIP-360: a producer recovering with its own id and epoch may bump it; the
                # epoch before the last bump is a retry whose answer was lost (answered the
                # same again); anything else means a newer producer took the id.
                retry = expected_epoch == metadata.last_producer_epoch and metadata.state.settled
                if expected_producer_id != metadata.producer_id or (
                    expected_epoch != metadata.producer_epoch and not retry
                ):
                    raise ProducerFencedError(
                        f"transactional id {transactional_id!r} is at producer "
                        f"{metadata.producer_id} epoch {metadata.producer_epoch}"
                    )
                if retry:
                    return ProducerGrant(metadata.producer_id, metadata.producer_epoch)
            if metadata.state.completing:
                raise ConcurrentTransactionsError(
                    f"transactional id {transactional_id!r}'s transaction is completing"
                )
            if metadata.state is TxnState.ONGOING:
                self._fence(metadata)
                raise ConcurrentTransactionsError(
                    f"transactional id {transactional_id!r} had a transaction ongoing: "
                    f"it is being aborted, retry"
                )
            producer_id, epoch = metadata.producer_id, metadata.producer_epoch + 1
            if epoch > MAX_EPOCH:
                producer_id, epoch = self._allocate(), 0
            self._log(
                metadata,
                last_producer_epoch=metadata.producer_epoch,
                producer_id=producer_id,
                producer_epoch=epoch,
                timeout_ms=timeout_ms,
                state=TxnState.EMPTY,
                partitions=set(),
                groups=set(),
                start_ms=-1,
            )
            return ProducerGrant(producer_id, epoch)

    def _fence(self, metadata: TransactionMetadata) -> None:
        """Abort the ongoing transaction under a bumped epoch (Kafka's PrepareEpochFence):
        the old producer is refused from now on (hold the partition's lock)."""
        epoch = metadata.producer_epoch + 1
        if epoch > MAX_EPOCH:
            epoch = metadata.producer_epoch  # Kafka aborts at the exhausted epoch as it is
        logger.info(
            "fencing transactional id %s (producer %d epoch %d): aborting its transaction",
            metadata.transactional_id,
            metadata.producer_id,
            metadata.producer_epoch,
        )
        # Kafka's PrepareEpochFence is the pending state of this change: once logged, the
        # transaction is PrepareAbort at the new epoch (also what a reload reads).
        self._log(metadata, producer_epoch=epoch, state=TxnState.PREPARE_ABORT)
        self._complete_later(metadata, committed=False)

    def _complete_later(self, metadata: TransactionMetadata, *, committed: bool) -> None:
        partition = self.placement.log.partition_for(metadata.transactional_id)
        self.markers.submit(
            Completion(
                metadata.transactional_id,
                metadata.producer_id,
                metadata.producer_epoch,
                committed,
                self.placement.log.coordinator_epoch(partition),
                frozenset(metadata.partitions),
                frozenset(metadata.groups),
            )
        )

    def resume(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        """A Prepare state read back: its markers written again (placement.py)."""
        logger.info(
            "resuming %s of transactional id %s",
            metadata.state.kafka_name,
            metadata.transactional_id,
        )
        self.markers.submit(
            Completion(
                metadata.transactional_id,
                metadata.producer_id,
                metadata.producer_epoch,
                metadata.state is TxnState.PREPARE_COMMIT,
                coordinator_epoch,
                frozenset(metadata.partitions),
            )
        )

    def complete(self, completion: Completion) -> None:
        """Every marker landed: log CompleteCommit/CompleteAbort (markers.py calls it)."""
        try:
            self._complete(completion)
        finally:
            if self.waits is not None:  # done or given up here: parked calls go on
                self.waits.release(completion.transactional_id)

    def _complete(self, completion: Completion) -> None:
        tid = completion.transactional_id
        try:
            partition = self.placement.check_here(tid)
        except NotCoordinatorError:
            return  # moved: its new coordinator read the Prepare state back and resumes it
        with self.placement.lock(partition):
            parked = self.waits.take_parked(tid) if self.waits is not None else NOTHING_PARKED
            metadata = self.placement.transactions(partition).get(tid)
            if (
                metadata is None
                or not metadata.state.completing
                or metadata.producer_id != completion.producer_id
                or metadata.producer_epoch != completion.producer_epoch
            ):
                return  # completed already, or reloaded and resumed on its own
            state = TxnState.COMPLETE_COMMIT if completion.committed else TxnState.COMPLETE_ABORT
            # The next transaction's parked adds, logged with the Complete state in one write:
            # the parked calls, taken up again, find their partitions added.
            following = parked.ongoing(metadata.producer_id, metadata.producer_epoch, _now_ms())
            self._log(metadata, following, state=state, partitions=set(), groups=set())
            logger.info("transactional id %s: %s", tid, state.kafka_name)

    # -- AddPartitionsToTxn, AddOffsetsToTxn ---------------------------------------------------

    def add_partitions(
        self,
        caller: Caller,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        park: bool = False,
    ) -> PartitionErrors:
        """Each partition's error (None: in the transaction). A whole-call error is raised;
        with `park`, CompletionPendingError while the previous transaction completes."""
        self._check_id(caller, "Write", transactional_id, "AddPartitionsToTxn")
        wanted = sorted(set(partitions))
        errors: PartitionErrors = {tp: self._partition_problem(caller, tp) for tp in wanted}
        if any(errors.values()):
            # Kafka adds none when one is refused: the others are OPERATION_NOT_ATTEMPTED.
            return errors
        self._add(transactional_id, producer_id, producer_epoch, wanted, set(), park)
        return errors

    def _partition_problem(self, caller: Caller, tp: TopicPartition) -> SeglogError | None:
        topic, partition = tp
        if not self.authorization.allows(caller, "Write", "topic", topic):
            return PermissionDeniedError(f"{caller.principal} may not Write topic {topic!r}")
        found = self.registry.topics.get(topic)
        if found is None or not 0 <= partition < len(found.partitions):
            return UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        return None

    def add_offsets(
        self,
        caller: Caller,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        *,
        park: bool = False,
    ) -> None:
        """The group's __consumer_offsets partition added to the transaction (`park`: as
        add_partitions)."""
        self._check_id(caller, "Write", transactional_id, "AddOffsetsToTxn")
        self.authorization.check(caller, [("Read", "group", group_id)], "AddOffsetsToTxn")
        if not group_id:
            raise InvalidGroupIdError("AddOffsetsToTxn: the group id is empty")
        offsets_partition = self._offsets_partition_for(group_id)
        self._add(
            transactional_id,
            producer_id,
            epoch,
            [(OFFSETS_TOPIC, offsets_partition)],
            {group_id},
            park,
        )

    def _add(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
        groups: set[str],
        park: bool,
    ) -> None:
        partition = self.placement.check_here(tid)
        with self.placement.lock(partition):
            metadata = self._current(
                self.placement.transactions(partition), tid, producer_id, epoch
            )
            if metadata.state.completing:
                message = f"transactional id {tid!r}'s previous transaction is completing"
                if park and self.waits is not None:
                    # Registered under the lock complete() logs under: no release is missed.
                    producer = (producer_id, epoch)
                    parked = self.waits.park(tid, producer, partitions, groups)
                    raise CompletionPendingError(message, parked)
                raise ConcurrentTransactionsError(message)
            ongoing = metadata.state is TxnState.ONGOING
            if ongoing and set(partitions) <= metadata.partitions and groups <= metadata.groups:
                return
            self._log(
                metadata,
                state=TxnState.ONGOING,
                partitions=metadata.partitions | set(partitions),
                groups=metadata.groups | groups,
                start_ms=metadata.start_ms if ongoing else _now_ms(),
            )

    def verify(
        self, caller: Caller | None, tid: str, producer_id: int, epoch: int, tp: TopicPartition
    ) -> None:
        """KIP-890: raise unless the partition is in the producer's ongoing transaction at its
        epoch (the produce path's check, and AddPartitionsToTxn v4+'s verify-only)."""
        partition = self.placement.check_here(tid)
        with self.placement.lock(partition):
            metadata = self.placement.transactions(partition).get(tid)
            if metadata is None or metadata.producer_id != producer_id:
                raise InvalidProducerIdMappingError(
                    f"producer id {producer_id} is not transactional id {tid!r}'s"
                )
            if metadata.producer_epoch != epoch:
                raise ProducerFencedError(
                    f"transactional id {tid!r} is at epoch {metadata.producer_epoch}, not {epoch}"
                )
            if metadata.state is not TxnState.ONGOING or tp not in metadata.partitions:
                raise InvalidTxnStateError(
                    f"{tp[0]}-{tp[1]} is not in transactional id {tid!r}'s ongoing transaction"
                )

    # -- EndTxn --------------------------------------------------------------------------------

    def end_txn(
        self, caller: Caller, transactional_id: str, producer_id: int, epoch: int, committed: bool
    ) -> None:
        """Answer once the Prepare state is logged; the markers follow."""
        self._check_id(caller, "Write", transactional_id, "EndTxn")
        partition = self.placement.check_here(transactional_id)
        with self.placement.lock(partition):
            transactions = self.placement.transactions(partition)
            metadata = self._current(transactions, transactional_id, producer_id, epoch)
            state = metadata.state
            wanted = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
            done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
            if state is wanted:
                raise ConcurrentTransactionsError(f"{transactional_id!r} is completing already")
            if state is done:
                return  # a retried EndTxn: Kafka answers it OK
            if state is not TxnState.ONGOING:
                raise InvalidTxnStateError(
                    f"transactional id {transactional_id!r} is {state.kafka_name}: cannot "
                    f"{'commit' if committed else 'abort'}"
                )
            self._log(metadata, state=wanted)
            self._complete_later(metadata, committed=committed)

    # -- timeouts ------------------------------------------------------------------------------

    def abort_timed_out(self, now_ms: int | None = None) -> int:
        """Fence and abort every ongoing transaction past its timeout; how many."""
        now_ms = _now_ms() if now_ms is None else now_ms
        aborted = 0
        for partition, transactions in self.placement.loaded_partitions().items():
            with self.placement.lock(partition):
                for metadata in list(transactions.values()):
                    if (
                        metadata.state is TxnState.ONGOING
                        and now_ms - metadata.start_ms > metadata.timeout_ms
                    ):
                        try:
                            self._fence(metadata)
                            aborted += 1
                        except SeglogError as exc:
                            logger.warning("aborting %s: %s", metadata.transactional_id, exc)
        return aborted
