"""KIP-890's verification where no transaction coordinator is asked: a producer's own produce
under a produce grant, straight to the leader's bulk listener (services/storage_node/
bulk_produce.py). The gateway verifies every other transactional produce with the coordinator
before forwarding it (the Kafka port's produce_verification.py, the gRPC Produce's
services/gateway/transactions/batch_verification.py); a node cannot ask it without a round trip
of its own, so it accepts here only what Kafka's leader accepts without asking: a transactional
batch of a producer whose transaction is already open in the partition at the batch's epoch
(Kafka's VerificationGuard.SENTINEL, UnifiedLog.hasOngoingTransaction), checked again under
the partition's lock, which a COMMIT/ABORT marker's write takes too (services/storage_node/
txn_markers.py), so no marker ends the transaction between the check and the write. The
first batch of a transaction in a partition is refused INVALID_TXN_STATE, nothing written, and
the producer sends that request through the gateway, which asks the coordinator (client/
produce_transport.py): a partition never added to the transaction can then never begin one.

Only a partition's first batch is looked at, as Kafka's verification does (a produce's batches
for one partition come from one producer): one header read per partition, no per-batch work.
"""

from __future__ import annotations

from ..coordinator_errors import InvalidTxnStateError
from ..errors import InvalidProducerEpochError
from ..records import batch_table
from ..records.batch import HEADER, read_header
from .producer_state import ProducerStateManager
from .validation import ValidatedRecords


def transactional_producer(validated: ValidatedRecords) -> tuple[int, int] | None:
    """(producer id, epoch) of the input's first batch when it is transactional, else None."""
    if not validated.flags & batch_table.HAS_PRODUCER or len(validated.view) < HEADER.size:
        return None
    header = read_header(validated.view, 0)
    if not header.is_transactional:
        return None
    return header.producer_id, header.producer_epoch


def check_open_transaction(
    state: ProducerStateManager, validated: ValidatedRecords, where: str
) -> None:
    """Raise unless the input is non-transactional or its producer's transaction is open in
    this partition at its epoch: INVALID_PRODUCER_EPOCH for an epoch older than the
    partition's (a fenced producer), INVALID_TXN_STATE otherwise."""
    producer = transactional_producer(validated)
    if producer is None:
        return
    producer_id, epoch = producer
    entry = state.producers.get(producer_id)
    if entry is not None and epoch < entry.epoch:
        raise InvalidProducerEpochError(
            f"producer {producer_id}'s epoch {epoch} is older than {entry.epoch}, {where}'s"
        )
    if entry is None or entry.epoch != epoch or entry.current_txn_first_offset < 0:
        raise InvalidTxnStateError(
            f"producer {producer_id} at epoch {epoch} has no transaction open in {where}: a "
            f"transaction's first batch in a partition is verified through the gateway"
        )
