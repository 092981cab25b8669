"""The one table from seglog's error reasons to Kafka's numeric error codes.

seglog's reasons (`ErrorCode` in common.proto, `SeglogError.reason`) already carry Kafka's
names where Kafka has one, so the table is mostly identity; the numbers come from
kafka-python's `kafka.errors` classes (each carries its `errno`) rather than being typed
here. The exceptions are spelled out: PERMISSION_DENIED is one reason in seglog but three
codes in Kafka, by the kind of resource refused (topic, group, cluster).
"""

from __future__ import annotations

from typing import Literal

from kafka import errors as kafka_errors

from seglog.errors import SeglogError

Resource = Literal["topic", "group", "cluster", "transactional_id"]

NONE: int = kafka_errors.NoError.errno
UNKNOWN_SERVER_ERROR: int = kafka_errors.UnknownError.errno
UNSUPPORTED_VERSION: int = kafka_errors.UnsupportedVersionError.errno
INVALID_REQUEST: int = kafka_errors.InvalidRequestError.errno
LEADER_NOT_AVAILABLE: int = kafka_errors.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER: int = kafka_errors.NotLeaderForPartitionError.errno
UNKNOWN_TOPIC_OR_PARTITION: int = kafka_errors.UnknownTopicOrPartitionError.errno
UNKNOWN_TOPIC_ID: int = kafka_errors.UnknownTopicIdError.errno
FETCH_SESSION_ID_NOT_FOUND: int = kafka_errors.FetchSessionIdNotFoundError.errno
TOPIC_AUTHORIZATION_FAILED: int = kafka_errors.TopicAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED: int = kafka_errors.ClusterAuthorizationFailedError.errno
GROUP_AUTHORIZATION_FAILED: int = kafka_errors.GroupAuthorizationFailedError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: int = (
    kafka_errors.TransactionalIdAuthorizationFailedError.errno
)
UNSUPPORTED_SASL_MECHANISM: int = kafka_errors.UnsupportedSaslMechanismError.errno
ILLEGAL_SASL_STATE: int = kafka_errors.IllegalSaslStateError.errno
SASL_AUTHENTICATION_FAILED: int = kafka_errors.SaslAuthenticationFailedError.errno

_AUTHORIZATION_FAILED: dict[str, int] = {
    "topic": TOPIC_AUTHORIZATION_FAILED,
    "group": GROUP_AUTHORIZATION_FAILED,
    "cluster": CLUSTER_AUTHORIZATION_FAILED,
    "transactional_id": TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


class InvalidRegularExpressionError(kafka_errors.BrokerResponseError):  # type: ignore[misc]
    """Kafka's INVALID_REGULAR_EXPRESSION (128, KIP-848), which kafka-python does not list."""

    errno = 128
    message = "INVALID_REGULAR_EXPRESSION"
    description = "The regular expression is not valid."


class ShareSessionLimitReachedError(kafka_errors.BrokerResponseError):  # type: ignore[misc]
    """Kafka's SHARE_SESSION_LIMIT_REACHED (133, KIP-932), which kafka-python does not list."""

    errno = 133
    message = "SHARE_SESSION_LIMIT_REACHED"
    description = "The limit of share sessions has been reached."


# seglog reason -> Kafka error class. Every reason of common.proto's ErrorCode is here (a unit
# test checks it), PERMISSION_DENIED apart (by resource, above).
_KAFKA_ERROR_BY_REASON: dict[str, type[kafka_errors.BrokerResponseError]] = {
    "NONE": kafka_errors.NoError,
    "UNKNOWN": kafka_errors.UnknownError,
    "CORRUPT_MESSAGE": kafka_errors.CorruptRecordError,
    "INVALID_RECORD": kafka_errors.InvalidRecordError,
    "INVALID_TIMESTAMP": kafka_errors.InvalidTimestampError,
    "UNSUPPORTED_COMPRESSION_TYPE": kafka_errors.UnsupportedCompressionTypeError,
    "MESSAGE_TOO_LARGE": kafka_errors.MessageSizeTooLargeError,
    "RECORD_LIST_TOO_LARGE": kafka_errors.RecordListTooLargeError,
    "OFFSET_OUT_OF_RANGE": kafka_errors.OffsetOutOfRangeError,
    # A negative or otherwise impossible offset in a request: Kafka has no INVALID_OFFSET.
    "INVALID_OFFSET": kafka_errors.OffsetOutOfRangeError,
    "UNKNOWN_TOPIC_OR_PARTITION": kafka_errors.UnknownTopicOrPartitionError,
    "TOPIC_ALREADY_EXISTS": kafka_errors.TopicAlreadyExistsError,
    "INVALID_CONFIG": kafka_errors.InvalidConfigurationError,
    "INVALID_PARTITIONS": kafka_errors.InvalidPartitionsError,
    "INVALID_REPLICATION_FACTOR": kafka_errors.InvalidReplicationFactorError,
    "INVALID_REQUIRED_ACKS": kafka_errors.InvalidRequiredAcksError,
    "INVALID_REQUEST": kafka_errors.InvalidRequestError,
    "NOT_LEADER_OR_FOLLOWER": kafka_errors.NotLeaderForPartitionError,
    "LEADER_NOT_AVAILABLE": kafka_errors.LeaderNotAvailableError,
    # The gateway could not reach the leader's node: retriable, clients refresh metadata.
    "NODE_UNAVAILABLE": kafka_errors.LeaderNotAvailableError,
    "REQUEST_TIMED_OUT": kafka_errors.RequestTimedOutError,
    # The Kafka listener mutes instead of answering it; a gRPC servicer's error, if relayed.
    "MEMORY_BUDGET_EXHAUSTED": kafka_errors.RequestTimedOutError,
    "GROUP_MAX_SIZE_REACHED": kafka_errors.GroupMaxSizeReachedError,
    "SERVER_BUSY": kafka_errors.RequestTimedOutError,
    "KAFKA_STORAGE_ERROR": kafka_errors.KafkaStorageError,
    # The partition is closing on its node (moving or deleted): retriable, as Kafka's
    # broker answers for a replica it is removing.
    "LOG_CLOSED": kafka_errors.NotLeaderForPartitionError,
    "CORRUPT_INDEX": kafka_errors.KafkaStorageError,
    "COORDINATOR_NOT_AVAILABLE": kafka_errors.CoordinatorNotAvailableError,
    "COORDINATOR_LOAD_IN_PROGRESS": kafka_errors.CoordinatorLoadInProgressError,
    "REBALANCE_IN_PROGRESS": kafka_errors.RebalanceInProgressError,
    "UNKNOWN_MEMBER_ID": kafka_errors.UnknownMemberIdError,
    "ILLEGAL_GENERATION": kafka_errors.IllegalGenerationError,
    "INVALID_GROUP_ID": kafka_errors.InvalidGroupIdError,
    "INVALID_SESSION_TIMEOUT": kafka_errors.InvalidSessionTimeoutError,
    "GROUP_ID_NOT_FOUND": kafka_errors.GroupIdNotFoundError,
    "INCONSISTENT_GROUP_PROTOCOL": kafka_errors.InconsistentGroupProtocolError,
    "INVALID_TOPIC": kafka_errors.InvalidTopicError,
    "OFFSET_METADATA_TOO_LARGE": kafka_errors.OffsetMetadataTooLargeError,
    "NON_EMPTY_GROUP": kafka_errors.NonEmptyGroupError,
    "GROUP_SUBSCRIBED_TO_TOPIC": kafka_errors.GroupSubscribedToTopicError,
    "FENCED_LEADER_EPOCH": kafka_errors.FencedLeaderEpochError,
    "UNKNOWN_LEADER_EPOCH": kafka_errors.UnknownLeaderEpochError,
    "NOT_ENOUGH_REPLICAS": kafka_errors.NotEnoughReplicasError,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": kafka_errors.NotEnoughReplicasAfterAppendError,
    "INVALID_UPDATE_VERSION": kafka_errors.InvalidUpdateVersionError,
    "INELIGIBLE_REPLICA": kafka_errors.IneligibleReplicaError,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": kafka_errors.OutOfOrderSequenceNumberError,
    "INVALID_PRODUCER_EPOCH": kafka_errors.InvalidProducerEpochError,
    "SASL_AUTHENTICATION_FAILED": kafka_errors.SaslAuthenticationFailedError,
    "NOT_COORDINATOR": kafka_errors.NotCoordinatorError,
    "POLICY_VIOLATION": kafka_errors.PolicyViolationError,
    "MEMBER_ID_REQUIRED": kafka_errors.MemberIdRequiredError,
    "FENCED_INSTANCE_ID": kafka_errors.FencedInstanceIdError,
    "INVALID_REPLICA_ASSIGNMENT": kafka_errors.InvalidReplicationAssignmentError,
    "NO_REASSIGNMENT_IN_PROGRESS": kafka_errors.NoReassignmentInProgressError,
    "ELECTION_NOT_NEEDED": kafka_errors.ElectionNotNeededError,
    "PREFERRED_LEADER_NOT_AVAILABLE": kafka_errors.PreferredLeaderNotAvailableError,
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": kafka_errors.EligibleLeadersNotAvailableError,
    "INCONSISTENT_CLUSTER_ID": kafka_errors.InconsistentClusterIdError,
    "UNKNOWN_TOPIC_ID": kafka_errors.UnknownTopicIdError,
    # The transaction coordinator's (services/gateway/transactions/).
    "PRODUCER_FENCED": kafka_errors.ProducerFencedError,
    "CONCURRENT_TRANSACTIONS": kafka_errors.ConcurrentTransactionsError,
    "INVALID_TXN_STATE": kafka_errors.InvalidTxnStateError,
    "INVALID_PRODUCER_ID_MAPPING": kafka_errors.InvalidProducerIdMappingError,
    "INVALID_TRANSACTION_TIMEOUT": kafka_errors.InvalidTransactionTimeoutError,
    "TRANSACTIONAL_ID_NOT_FOUND": kafka_errors.TransactionalIdNotFoundError,
    # KIP-848 consumer groups' (services/gateway/groups/).
    "FENCED_MEMBER_EPOCH": kafka_errors.FencedMemberEpochError,
    "UNRELEASED_INSTANCE_ID": kafka_errors.UnreleasedInstanceIdError,
    "UNSUPPORTED_ASSIGNOR": kafka_errors.UnsupportedAssignorError,
    "STALE_MEMBER_EPOCH": kafka_errors.StaleMemberEpochError,
    "INVALID_REGULAR_EXPRESSION": InvalidRegularExpressionError,
    "UNSUPPORTED_VERSION": kafka_errors.UnsupportedVersionError,
    # Share groups' (services/gateway/share/).
    "INVALID_RECORD_STATE": kafka_errors.InvalidRecordStateError,
    "SHARE_SESSION_NOT_FOUND": kafka_errors.ShareSessionNotFoundError,
    "INVALID_SHARE_SESSION_EPOCH": kafka_errors.InvalidShareSessionEpochError,
    "SHARE_SESSION_LIMIT_REACHED": ShareSessionLimitReachedError,
    "FENCED_STATE_EPOCH": kafka_errors.FencedStateEpochError,
}

PERMISSION_DENIED = "PERMISSION_DENIED"


def kafka_error_code(error_or_reason: BaseException | str, resource: Resource = "topic") -> int:
    """Kafka's numeric error code for a seglog error (or its reason, a proto `ErrorCode`
    name): PERMISSION_DENIED becomes the AUTHORIZATION_FAILED code of `resource`; anything
    that is not a SeglogError, or a reason not in the table, UNKNOWN_SERVER_ERROR."""
    if isinstance(error_or_reason, str):
        reason = error_or_reason
    elif isinstance(error_or_reason, SeglogError):
        reason = error_or_reason.reason
    else:
        return UNKNOWN_SERVER_ERROR
    if reason == PERMISSION_DENIED:
        return _AUTHORIZATION_FAILED[resource]
    error = _KAFKA_ERROR_BY_REASON.get(reason)
    if error is None:
        return UNKNOWN_SERVER_ERROR
    code: int = error.errno
    return code


def mapped_reasons() -> set[str]:
    """Every reason the table maps (for the test that it covers the proto's ErrorCode)."""
    return set(_KAFKA_ERROR_BY_REASON) | {PERMISSION_DENIED}
