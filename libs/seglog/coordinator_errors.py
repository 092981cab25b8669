"""The gateway coordinators' error families: the transaction coordinator's, KIP-848 consumer
groups' and KIP-932 share groups'. Each is a `SeglogError` with its stable `reason` and
`retriable` flag, as in errors.py, and `errors.error_classes()` finds them there.
"""

from __future__ import annotations

from .errors import SeglogError

# -- transactions (the gateway's transaction coordinator) --


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


# -- KIP-848 consumer groups --


class FencedMemberEpochError(SeglogError):
    """KIP-848: a member's epoch the coordinator cannot take; it joins again (epoch 0)."""

    reason = "FENCED_MEMBER_EPOCH"


class UnreleasedInstanceIdError(SeglogError):
    """KIP-848: a static member's instance id is still held by a member that did not leave."""

    reason = "UNRELEASED_INSTANCE_ID"


class UnsupportedAssignorError(SeglogError):
    """KIP-848: a server-side assignor the coordinator does not have."""

    reason = "UNSUPPORTED_ASSIGNOR"


class StaleMemberEpochError(SeglogError):
    """KIP-848: an offset commit or fetch from a member epoch that is not its current one."""

    reason = "STALE_MEMBER_EPOCH"


class InvalidRegularExpressionError(SeglogError):
    """KIP-848: a subscription's regular expression that does not compile (RE2)."""

    reason = "INVALID_REGULAR_EXPRESSION"


# -- KIP-932 share groups (Kafka's codes: the Kafka adapter's share_group_apis.py) --


class InvalidRecordStateError(SeglogError):
    """An acknowledgement of a record this member does not hold (not acquired, acquired by
    another member, or its lock lapsed)."""

    reason = "INVALID_RECORD_STATE"


class ShareSessionNotFoundError(SeglogError):
    """An incremental ShareFetch/ShareAcknowledge with no share session open."""

    reason = "SHARE_SESSION_NOT_FOUND"
    retriable = True


class InvalidShareSessionEpochError(SeglogError):
    """A share session request whose epoch is not the session's next one."""

    reason = "INVALID_SHARE_SESSION_EPOCH"
    retriable = True


class FencedStateEpochError(SeglogError):
    """A write of a share partition's state at a state epoch older than the one stored: a
    newer holder took the share partition over (Kafka's FENCED_STATE_EPOCH); this one
    forgets its copy and reads the state back before using it again."""

    reason = "FENCED_STATE_EPOCH"


class ShareSessionLimitReachedError(SeglogError):
    """A new share session on a gateway holding as many as it may."""

    reason = "SHARE_SESSION_LIMIT_REACHED"
    retriable = True
