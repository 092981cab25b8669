"""What the Kafka administration tests share: the grants their clusters give the Kafka
listener's anonymous principal when the authorizer is on, and confluent-kafka's futures read
with a deadline."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException

from tests.authorizer_modes import Grant

RESULT_TIMEOUT_S = 20
# What the admin tests do, as User:ANONYMOUS (the Kafka listener's principal without SASL)
# when the authorizer is on: manage topics, configs, partitions, records, groups, ACLs and
# reassignments, and produce and read what they check.
ADMIN_GRANTS = (
    Grant(
        "topic",
        (
            "Create",
            "Delete",
            "Alter",
            "Describe",
            "DescribeConfigs",
            "AlterConfigs",
            "Read",
            "Write",
        ),
    ),
    Grant("group", ("Read", "Describe", "Delete")),
    Grant("cluster", ("Describe", "Alter", "DescribeConfigs", "AlterConfigs", "IdempotentWrite")),
)


def result_of(future):
    return future.result(timeout=RESULT_TIMEOUT_S)


def error_code_of(future) -> int:
    with pytest.raises(KafkaException) as raised:
        result_of(future)
    return raised.value.args[0].code()
