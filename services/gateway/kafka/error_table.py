"""Kafka's error codes for the data-path APIs (Produce, Fetch, ListOffsets), per API.

error_codes.py maps each seglog reason to Kafka's code of the same meaning. That is not
always a code the client of a given API can take: a Kafka broker answers a produce or a fetch
whose partition has no reachable leader NOT_LEADER_OR_FOLLOWER (it is not the leader, as far
as it knows), never LEADER_NOT_AVAILABLE, and Kafka's Java consumer stops with
`IllegalStateException: Unexpected error code 5 while fetching` on a code its fetcher does not
list. So each API has its own overrides here, chosen from what the clients handle (the sets
below are read from their sources; tests/unit/test_kafka_error_table.py checks every code this
table can answer against them):

- Java consumer, FetchCollector.handleInitializeErrors: NOT_LEADER_OR_FOLLOWER,
  REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH, OFFSET_NOT_AVAILABLE
  (metadata refresh, retried); UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID,
  INCONSISTENT_TOPIC_ID (refresh); OFFSET_OUT_OF_RANGE (reset); UNKNOWN_LEADER_EPOCH,
  UNKNOWN_SERVER_ERROR (retried); TOPIC_AUTHORIZATION_FAILED and CORRUPT_MESSAGE (raised to
  the application); anything else: IllegalStateException.
- librdkafka, rdkafka_fetcher.c rd_kafka_fetch_reply_handle_partition_error: OFFSET_NOT_AVAILABLE,
  UNKNOWN_TOPIC_OR_PART, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, BROKER_NOT_AVAILABLE,
  REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH (refresh, retried);
  OFFSET_OUT_OF_RANGE (reset); anything else goes to the application as a consumer error.
- Java producer, Sender.canRetry: any RetriableException (NOT_LEADER_OR_FOLLOWER,
  REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS, ...); librdkafka's rd_kafka_handle_Produce_error
  retries the same family.
- Java ListOffsets (OffsetFetcherUtils, admin ListOffsetsHandler): NOT_LEADER_OR_FOLLOWER and
  the other metadata errors are retried after a refresh; any other RetriableException
  (REQUEST_TIMED_OUT) retried.

Overload (REQUEST_TIMED_OUT, SERVER_BUSY, MEMORY_BUDGET_EXHAUSTED) is therefore
REQUEST_TIMED_OUT for Produce and ListOffsets, and REPLICA_NOT_AVAILABLE for Fetch: the one
code all three consumers (Java, librdkafka, kafka-python) retry without telling the
application, where REQUEST_TIMED_OUT kills the Java consumer.
"""

from __future__ import annotations

from enum import Enum

from kafka import errors as kafka_errors

from seglog.errors import SeglogError

from .error_codes import UNKNOWN_SERVER_ERROR, Resource, kafka_error_code

NOT_LEADER_OR_FOLLOWER: int = kafka_errors.NotLeaderForPartitionError.errno
REPLICA_NOT_AVAILABLE: int = kafka_errors.ReplicaNotAvailableError.errno
REQUEST_TIMED_OUT: int = kafka_errors.RequestTimedOutError.errno


class DataApi(Enum):
    PRODUCE = "Produce"
    FETCH = "Fetch"
    LIST_OFFSETS = "ListOffsets"


# A leader that is down, unreachable or moving away: what a Kafka broker answers for a
# partition it does not lead (clients refresh metadata and retry).
_LEADER_GONE = ("LEADER_NOT_AVAILABLE", "NODE_UNAVAILABLE", "LOG_CLOSED", "NOT_LEADER_OR_FOLLOWER")
# The gateway or a node past a bound: retried by the client after its backoff.
_OVERLOAD = ("REQUEST_TIMED_OUT", "SERVER_BUSY", "MEMORY_BUDGET_EXHAUSTED")

_OVERRIDES: dict[DataApi, dict[str, int]] = {
    DataApi.PRODUCE: {
        **dict.fromkeys(_LEADER_GONE, NOT_LEADER_OR_FOLLOWER),
        **dict.fromkeys(_OVERLOAD, REQUEST_TIMED_OUT),
    },
    DataApi.FETCH: {
        **dict.fromkeys(_LEADER_GONE, NOT_LEADER_OR_FOLLOWER),
        **dict.fromkeys(_OVERLOAD, REPLICA_NOT_AVAILABLE),
        # No INVALID_OFFSET in Kafka: a fetch offset outside the log is OFFSET_OUT_OF_RANGE.
        "INVALID_OFFSET": kafka_errors.OffsetOutOfRangeError.errno,
        # A corrupt stored batch, or an index, is the replica's storage failing: the Java
        # consumer raises CORRUPT_MESSAGE to the application, KAFKA_STORAGE_ERROR it retries
        # (another replica may lead by then).
        "CORRUPT_INDEX": kafka_errors.KafkaStorageError.errno,
        # Anything else a fetch can meet and the consumers do not list (a node's unexpected
        # failure): the Java consumer retries UNKNOWN_SERVER_ERROR.
    },
    DataApi.LIST_OFFSETS: {
        **dict.fromkeys(_LEADER_GONE, NOT_LEADER_OR_FOLLOWER),
        **dict.fromkeys(_OVERLOAD, REQUEST_TIMED_OUT),
    },
}

# The codes each API's answer may carry; anything else the base table gives becomes
# UNKNOWN_SERVER_ERROR (for Fetch: retried by the Java consumer rather than fatal to it).
FETCH_CODES: frozenset[int] = frozenset(
    {
        0,
        NOT_LEADER_OR_FOLLOWER,
        REPLICA_NOT_AVAILABLE,
        kafka_errors.KafkaStorageError.errno,
        kafka_errors.FencedLeaderEpochError.errno,
        kafka_errors.UnknownLeaderEpochError.errno,
        kafka_errors.UnknownTopicOrPartitionError.errno,
        kafka_errors.OffsetOutOfRangeError.errno,
        kafka_errors.TopicAuthorizationFailedError.errno,
        kafka_errors.CorruptRecordError.errno,
        UNKNOWN_SERVER_ERROR,
    }
)


def data_error_code(api: DataApi, error_or_reason: BaseException | str) -> int:
    """Kafka's code for `error_or_reason` (a SeglogError or its reason) in an answer of `api`."""
    if isinstance(error_or_reason, str):
        reason: str | None = error_or_reason
    elif isinstance(error_or_reason, SeglogError):
        reason = error_or_reason.reason
    else:
        reason = None
    resource: Resource = "topic"
    if reason is not None and reason in _OVERRIDES[api]:
        return _OVERRIDES[api][reason]
    code = kafka_error_code(reason if reason is not None else error_or_reason, resource)
    if api is DataApi.FETCH and code not in FETCH_CODES:
        return UNKNOWN_SERVER_ERROR
    return code
