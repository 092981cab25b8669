"""The transaction coordinator's own errors, each named by the Kafka error it is (the Kafka
adapter's table, kafka/error_codes.py, maps the reasons to Kafka's codes). The gRPC API has no
transactions yet, so these have no `ErrorCode` in common.proto."""

from __future__ import annotations

from seglog.errors import SeglogError


class ProducerFencedError(SeglogError):
    """A newer producer with the same transactional id has the id (a newer epoch)."""

    reason = "PRODUCER_FENCED"


class ConcurrentTransactionsError(SeglogError):
    """The id's previous transaction is still completing: retry shortly."""

    reason = "CONCURRENT_TRANSACTIONS"
    retriable = True


class InvalidTxnStateError(SeglogError):
    """The call does not fit the transaction's state (e.g. a commit while aborting)."""

    reason = "INVALID_TXN_STATE"


class InvalidProducerIdMappingError(SeglogError):
    """The producer id is not the one the transactional id has."""

    reason = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(SeglogError):
    """transaction.timeout.ms is not positive or above transaction.max.timeout.ms."""

    reason = "INVALID_TRANSACTION_TIMEOUT"


class TransactionalIdNotFoundError(SeglogError):
    """DescribeTransactions of an id the coordinator does not know."""

    reason = "TRANSACTIONAL_ID_NOT_FOUND"
