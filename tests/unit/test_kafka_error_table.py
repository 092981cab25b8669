"""The data-path error table (kafka/error_table.py) against what Kafka's clients handle.

The handled sets are read from the clients' sources: the Java consumer's
FetchCollector.handleInitializeErrors (any other code: IllegalStateException, the consumer
dies) and librdkafka's rd_kafka_fetch_reply_handle_partition_error (its internally retried
codes; any other goes to the application). Retriable for Produce and ListOffsets is Kafka's
RetriableException family, which kafka-python's error classes carry as `retriable`."""

from __future__ import annotations

import pytest
from kafka import errors as kafka_errors

from seglog.errors import (
    LeaderNotAvailableError,
    NodeUnavailableError,
    RequestTimedOutError,
    SeglogError,
)
from services.gateway.kafka.error_codes import mapped_reasons
from services.gateway.kafka.error_table import DataApi, data_error_code

JAVA_FETCH_HANDLED = {
    0,  # NONE
    6,  # NOT_LEADER_OR_FOLLOWER
    9,  # REPLICA_NOT_AVAILABLE
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    78,  # OFFSET_NOT_AVAILABLE
    3,  # UNKNOWN_TOPIC_OR_PARTITION
    100,  # UNKNOWN_TOPIC_ID
    103,  # INCONSISTENT_TOPIC_ID
    1,  # OFFSET_OUT_OF_RANGE
    29,  # TOPIC_AUTHORIZATION_FAILED
    75,  # UNKNOWN_LEADER_EPOCH
    -1,  # UNKNOWN_SERVER_ERROR
    2,  # CORRUPT_MESSAGE
}
# Retried by the Java consumer without telling the application.
JAVA_FETCH_RETRIED = {6, 9, 56, 74, 78, 3, 100, 103, 75, -1}
# Retried inside librdkafka (metadata refresh and backoff).
LIBRDKAFKA_FETCH_RETRIED = {78, 3, 5, 6, 8, 9, 56, 74}

LEADER_GONE = ["LEADER_NOT_AVAILABLE", "NODE_UNAVAILABLE", "LOG_CLOSED"]
OVERLOAD = ["REQUEST_TIMED_OUT", "SERVER_BUSY", "MEMORY_BUDGET_EXHAUSTED"]


def retriable(code: int) -> bool:
    return bool(kafka_errors.for_code(code).retriable)


@pytest.mark.parametrize("reason", sorted(mapped_reasons()))
def test_every_fetch_answer_is_a_code_the_java_consumer_handles(reason):
    assert data_error_code(DataApi.FETCH, reason) in JAVA_FETCH_HANDLED


@pytest.mark.parametrize("reason", LEADER_GONE + OVERLOAD)
def test_a_fetch_from_a_gone_or_busy_leader_is_retried_by_both_consumers(reason):
    code = data_error_code(DataApi.FETCH, reason)
    assert code in JAVA_FETCH_RETRIED and code in LIBRDKAFKA_FETCH_RETRIED


@pytest.mark.parametrize("api", [DataApi.PRODUCE, DataApi.FETCH, DataApi.LIST_OFFSETS])
@pytest.mark.parametrize("reason", LEADER_GONE)
def test_a_leader_down_or_moving_is_not_leader_or_follower_as_a_kafka_broker_answers(api, reason):
    assert data_error_code(api, reason) == kafka_errors.NotLeaderForPartitionError.errno


@pytest.mark.parametrize("api", [DataApi.PRODUCE, DataApi.LIST_OFFSETS])
@pytest.mark.parametrize("reason", LEADER_GONE + OVERLOAD)
def test_produce_and_list_offsets_answer_retriable_codes_for_a_gone_or_busy_leader(api, reason):
    assert retriable(data_error_code(api, reason))


def test_errors_map_as_their_reasons():
    assert data_error_code(DataApi.FETCH, LeaderNotAvailableError("x")) == 6
    assert data_error_code(DataApi.PRODUCE, NodeUnavailableError("x")) == 6
    assert data_error_code(DataApi.PRODUCE, RequestTimedOutError("x")) == 7
    assert data_error_code(DataApi.FETCH, ValueError("not ours")) == -1
    assert data_error_code(DataApi.LIST_OFFSETS, SeglogError("no reason")) == -1
