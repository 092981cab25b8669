"""The error taxonomy shared by the engine, the services and the clients.

One base error, `SeglogError`. Every subclass carries a stable `reason` (a machine-readable
name, mirrored by the API's reason codes) and a `retriable` flag: a retriable error may
succeed if the caller tries again later (a leader moved, a node restarted); a non-retriable
one will fail the same way every time (the input is bad).

Operating errors (bad input, corrupt bytes, I/O failures) are raised as these errors, never
as `assert`s, which vanish under `python -O`.

The gateway coordinators' families (transactions, KIP-848 consumer groups, KIP-932 share
groups) are in coordinator_errors.py; `error_classes()` finds them too.
"""

from __future__ import annotations


class SeglogError(Exception):
    """Base of every error seglog raises on purpose. `details`: what a caller needs besides
    the message to act on it (carried in the gRPC status's ErrorInfo metadata)."""

    reason = "UNKNOWN"
    retriable = False

    def __init__(self, *args: object, details: dict[str, str] | None = None) -> None:
        super().__init__(*args)
        self.details: dict[str, str] = dict(details or {})


class CorruptRecordError(SeglogError):
    """Bytes that claim to be records are not: bad CRC, torn batch, impossible lengths."""

    reason = "CORRUPT_MESSAGE"
    retriable = False


class InvalidRecordError(SeglogError):
    """Well-formed bytes that break a rule: record count vs offsets, compression, magic."""

    reason = "INVALID_RECORD"


class InvalidTimestampError(InvalidRecordError):
    """A batch timestamp outside the window the log accepts."""

    reason = "INVALID_TIMESTAMP"


class RecordTooLargeError(SeglogError):
    """A batch larger than `max_message_bytes`."""

    reason = "MESSAGE_TOO_LARGE"


class UnsupportedCompressionError(InvalidRecordError):
    """A compression codec id that seglog does not know."""

    reason = "UNSUPPORTED_COMPRESSION_TYPE"


class OffsetOutOfRangeError(SeglogError):
    """A fetch or seek outside [log start offset, log end offset]."""

    reason = "OFFSET_OUT_OF_RANGE"


class InvalidOffsetError(SeglogError):
    """An offset that can never be valid: negative, or going backwards where it must not."""

    reason = "INVALID_OFFSET"


class UnknownTopicOrPartitionError(SeglogError):
    reason = "UNKNOWN_TOPIC_OR_PARTITION"
    retriable = True


class UnknownTopicIdError(SeglogError):
    """A topic named by an id (KIP-516) that no topic has: deleted, or never made (Kafka's
    UNKNOWN_TOPIC_ID; retriable there, as metadata may lag a creation)."""

    reason = "UNKNOWN_TOPIC_ID"
    retriable = True


class TopicAlreadyExistsError(SeglogError):
    reason = "TOPIC_ALREADY_EXISTS"


class InvalidConfigError(SeglogError):
    """A configuration key that does not exist or a value out of range."""

    reason = "INVALID_CONFIG"


class NotLeaderError(SeglogError):
    reason = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class NodeUnavailableError(SeglogError):
    reason = "NODE_UNAVAILABLE"
    retriable = True


class LogClosedError(SeglogError):
    """An operation on a log (or index, or file) that has been closed or deleted."""

    reason = "LOG_CLOSED"
    retriable = True


class StorageError(SeglogError):
    """An I/O error from the disk (full, read-only, gone). The log was cut back first."""

    reason = "KAFKA_STORAGE_ERROR"
    retriable = True


class CorruptIndexError(SeglogError):
    """An index file that fails its sanity check; the caller rebuilds it from the log."""

    reason = "CORRUPT_INDEX"


class RecordListTooLargeError(SeglogError):
    """A whole request larger than the server accepts (`max_request_bytes`)."""

    reason = "RECORD_LIST_TOO_LARGE"


class InvalidPartitionsError(SeglogError):
    reason = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(SeglogError):
    reason = "INVALID_REPLICATION_FACTOR"


class InvalidRequiredAcksError(SeglogError):
    """acks other than 0 and 1: `all` needs replication, which does not exist yet."""

    reason = "INVALID_REQUIRED_ACKS"


class InvalidRequestError(SeglogError):
    """A request that is malformed as a whole (missing fields, duplicates, bad ranges)."""

    reason = "INVALID_REQUEST"


class InvalidTopicError(SeglogError):
    """An illegal topic name, or a client request on an internal (`__`) topic, which only
    the cluster itself writes (Kafka's INVALID_TOPIC_EXCEPTION)."""

    reason = "INVALID_TOPIC"


class OffsetMetadataTooLargeError(SeglogError):
    """Commit metadata over `offset.metadata.max.bytes` (Kafka's OFFSET_METADATA_TOO_LARGE)."""

    reason = "OFFSET_METADATA_TOO_LARGE"


class NonEmptyGroupError(SeglogError):
    """The group has active members: it cannot be deleted (Kafka's NON_EMPTY_GROUP)."""

    reason = "NON_EMPTY_GROUP"


class GroupSubscribedToTopicError(SeglogError):
    """The group's members read the topic whose offsets were to be deleted."""

    reason = "GROUP_SUBSCRIBED_TO_TOPIC"


class LeaderNotAvailableError(SeglogError):
    """The partition's leader is on a node that is down or unreachable."""

    reason = "LEADER_NOT_AVAILABLE"
    retriable = True


class RequestTimedOutError(SeglogError):
    reason = "REQUEST_TIMED_OUT"
    retriable = True


class MemoryBudgetExhaustedError(SeglogError):
    """The server's memory for requests in flight (queued.max.request.bytes) stayed full:
    retry after a back-off."""

    reason = "MEMORY_BUDGET_EXHAUSTED"
    retriable = True


class GroupMaxSizeReachedError(SeglogError):
    """A new member cannot join: the group has group.max.size members already."""

    reason = "GROUP_MAX_SIZE_REACHED"


class ServerBusyError(SeglogError):
    """The server's threads for this kind of call are all in use: retry after a back-off."""

    reason = "SERVER_BUSY"
    retriable = True


class CoordinatorNotAvailableError(SeglogError):
    """The group coordinator cannot serve yet: the offsets topic has no live leader."""

    reason = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class NotCoordinatorError(SeglogError):
    """Another gateway coordinates the group (Kafka's NOT_COORDINATOR): ask it, at
    `coordinator` (host:port; "" when not known yet: find the coordinator again)."""

    reason = "NOT_COORDINATOR"
    retriable = True

    def __init__(self, message: str, *, coordinator: str = "") -> None:
        super().__init__(message, details={"coordinator": coordinator})

    @property
    def coordinator(self) -> str:
        return self.details.get("coordinator", "")


class RegistryUnavailableError(RequestTimedOutError):
    """The registry's store (etcd) cannot be reached: metadata changes wait until it can;
    the data path goes on with the metadata every gateway holds."""


class CoordinatorLoadInProgressError(SeglogError):
    """The coordinator is still reading a group's committed offsets back."""

    reason = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class RebalanceInProgressError(SeglogError):
    """The group is rebalancing: the member must join again before it commits or fetches."""

    reason = "REBALANCE_IN_PROGRESS"
    retriable = True


class UnknownMemberIdError(SeglogError):
    """The coordinator does not know the member (it timed out or left): join anew."""

    reason = "UNKNOWN_MEMBER_ID"


class IllegalGenerationError(SeglogError):
    """The member speaks for an older generation of the group: join again."""

    reason = "ILLEGAL_GENERATION"


class InvalidGroupIdError(SeglogError):
    reason = "INVALID_GROUP_ID"


class InvalidSessionTimeoutError(SeglogError):
    reason = "INVALID_SESSION_TIMEOUT"


class GroupIdNotFoundError(SeglogError):
    reason = "GROUP_ID_NOT_FOUND"


class InconsistentGroupProtocolError(SeglogError):
    """A member's assignment strategies share none with the group's."""

    reason = "INCONSISTENT_GROUP_PROTOCOL"


class FencedLeaderEpochError(SeglogError):
    """The request's leader epoch is older than the partition's (a replica or client behind
    on metadata): refresh it before retrying."""

    reason = "FENCED_LEADER_EPOCH"
    retriable = True


class UnknownLeaderEpochError(SeglogError):
    """The request's leader epoch is newer than this replica knows: it has not learnt of the
    new leadership yet."""

    reason = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class NotEnoughReplicasError(SeglogError):
    """acks=all with fewer in-sync replicas than `min.insync.replicas`: nothing was written."""

    reason = "NOT_ENOUGH_REPLICAS"
    retriable = True


class NotEnoughReplicasAfterAppendError(SeglogError):
    """Written by the leader, but the in-sync replicas fell below `min.insync.replicas`
    before they all had it."""

    reason = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True


class InvalidUpdateVersionError(SeglogError):
    """An AlterPartition based on an older partition epoch than the registry's."""

    reason = "INVALID_UPDATE_VERSION"


class IneligibleReplicaError(SeglogError):
    """An AlterPartition adding a replica that may not join the ISR (its node is down)."""

    reason = "INELIGIBLE_REPLICA"


class OutOfOrderSequenceError(SeglogError):
    """A batch's sequence does not continue its producer's (Kafka's
    OUT_OF_ORDER_SEQUENCE_NUMBER): a batch before it was lost."""

    reason = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(SeglogError):
    """A batch from an older epoch of its producer than the partition has seen."""

    reason = "INVALID_PRODUCER_EPOCH"


class PermissionDeniedError(SeglogError):
    """The caller's identity may not do this (names the operation and the resource)."""

    reason = "PERMISSION_DENIED"


class PolicyViolationError(SeglogError):
    """A request the topic's configured policy forbids: deleting records of a topic that is
    compacted only (Kafka's POLICY_VIOLATION)."""

    reason = "POLICY_VIOLATION"


class AuthenticationError(SeglogError):
    """A bearer token that does not verify (Kafka's SASL_AUTHENTICATION_FAILED)."""

    reason = "SASL_AUTHENTICATION_FAILED"


class InvalidReplicaAssignmentError(SeglogError):
    """A reassignment's replica list that cannot be: empty, a node twice, an unknown node."""

    reason = "INVALID_REPLICA_ASSIGNMENT"


class NoReassignmentInProgressError(SeglogError):
    """Cancelling the reassignment of a partition that is not being moved."""

    reason = "NO_REASSIGNMENT_IN_PROGRESS"


class ElectionNotNeededError(SeglogError):
    """ElectLeaders for a partition already led as asked."""

    reason = "ELECTION_NOT_NEEDED"


class PreferredLeaderNotAvailableError(SeglogError):
    """A preferred-leader election whose preferred replica is not in sync or not live."""

    reason = "PREFERRED_LEADER_NOT_AVAILABLE"
    retriable = True


class EligibleLeadersNotAvailableError(SeglogError):
    """An unclean election with no live replica to elect."""

    reason = "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    retriable = True


class MemberIdRequiredError(SeglogError):
    """Kafka's JoinGroup v4+: a new member must join again with the id the coordinator gave
    it."""

    reason = "MEMBER_ID_REQUIRED"
    retriable = True

    def __init__(self, message: str, member_id: str = "") -> None:
        super().__init__(message)
        self.member_id = member_id


class FencedInstanceIdError(SeglogError):
    """A static member's old incarnation: another member id holds its group.instance.id."""

    reason = "FENCED_INSTANCE_ID"


class InconsistentClusterIdError(SeglogError):
    """A storage node and a registry of different clusters (Kafka's INCONSISTENT_CLUSTER_ID):
    the node's data directory belongs to another cluster than the registry it reached."""

    reason = "INCONSISTENT_CLUSTER_ID"


class UnsupportedVersionError(SeglogError):
    """An API version a call may not use (a KIP-848 member committing below OffsetCommit v9)."""

    reason = "UNSUPPORTED_VERSION"


def error_classes() -> dict[str, type[SeglogError]]:
    """Every error class by its reason. A reason shared by a class and its subclasses maps to
    the base class (met first in the walk): a subclass sharing a reason only refines the
    message locally, and an answer from the wire cannot say which refinement it was."""
    from . import coordinator_errors  # noqa: F401  (its classes are subclasses found below)

    found: dict[str, type[SeglogError]] = {SeglogError.reason: SeglogError}
    pending: list[type[SeglogError]] = [SeglogError]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            found.setdefault(sub.reason, sub)
            pending.append(sub)
    return found
