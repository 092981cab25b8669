"""Every Kafka API the listener serves, registered here by name: one line per area, each
area's module registering its APIs with the versions it serves (`register(table)`).

A reader (and the type checker) follows the listener's APIs from this list alone; an area
that adds a module adds its line here. README's Kafka API table is printed from the same
table (`python -m devtools.readme_tables`) and a test keeps the two equal.
"""

from __future__ import annotations

from . import (
    acl_apis,
    admin_apis,
    api_versions_apis,
    config_apis,
    config_resources_apis,
    consumer_group_apis,
    describe_topic_partitions_apis,
    fetch_apis,
    find_coordinator_apis,
    group_admin_apis,
    group_apis,
    group_offset_apis,
    list_offsets_apis,
    metadata_apis,
    produce_apis,
    producer_id_apis,
    producer_state_apis,
    quota_apis,
    reassignment_apis,
    sasl_apis,
    scram_apis,
    share_fetch_apis,
    share_group_apis,
    share_offsets_apis,
    txn_admin_apis,
    txn_apis,
    txn_marker_apis,
    txn_offset_commit_apis,
)
from .api_table import ApiTable


def kafka_api_table() -> ApiTable:
    """The listener's table: every handler takes its core objects from the call
    (`KafkaCall.core`), so the table itself holds no gateway and is the same for all."""
    table = ApiTable()
    api_versions_apis.register(table)
    sasl_apis.register(table)
    scram_apis.register(table)
    metadata_apis.register(table)
    describe_topic_partitions_apis.register(table)
    produce_apis.register(table)
    fetch_apis.register(table)
    list_offsets_apis.register(table)
    producer_state_apis.register(table)
    admin_apis.register(table)
    config_apis.register(table)
    config_resources_apis.register(table)
    producer_id_apis.register(table)
    acl_apis.register(table)
    quota_apis.register(table)
    reassignment_apis.register(table)
    group_apis.register(table)
    find_coordinator_apis.register(table)
    group_offset_apis.register(table)
    txn_offset_commit_apis.register(table)
    group_admin_apis.register(table)
    share_group_apis.register(table)
    share_fetch_apis.register(table)
    share_offsets_apis.register(table)
    txn_apis.register(table)
    txn_admin_apis.register(table)
    txn_marker_apis.register(table)
    consumer_group_apis.register(table)
    return table
