"""What CreateTopics, CreatePartitions and IncrementalAlterConfigs may do
(services/gateway/cluster/topic_rules.py), as Kafka's ReplicationControlManagerTest checks
its controller's validation: the request and the registry's numbers in, the applied
defaults or the error out."""

from __future__ import annotations

import pytest

from seglog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
)
from seglog.storage import LogConfig
from services.gateway.cluster.topic_rules import (
    DEFAULT_NUM_PARTITIONS,
    MAX_REPLICATION_FACTOR,
    TopicLimits,
    altered_configs,
    check_cluster_room,
    check_enough_nodes,
    check_growth,
    check_new_topic,
    is_internal_topic,
    refuse_internal,
)

LIMITS = TopicLimits(max_partitions_per_topic=10, max_partitions=30, default_replication_factor=2)


def test_minus_one_takes_the_default_partition_count_and_replication_factor():
    assert check_new_topic("orders", -1, -1, {}, LIMITS) == (DEFAULT_NUM_PARTITIONS, 2)
    assert check_new_topic("orders", 4, 3, {}, LIMITS) == (4, 3)


@pytest.mark.parametrize("name", ["", ".", "..", "has space", "slash/in", "x" * 250])
def test_illegal_topic_names_are_refused(name):
    with pytest.raises(InvalidTopicError):
        check_new_topic(name, 1, 1, {}, LIMITS)


def test_a_name_whose_partition_directories_would_pass_the_file_name_limit_is_refused():
    # 249 characters is a legal Kafka name, but "<name>-<partition>" plus the suffix a
    # deleted directory takes does not fit in 255 bytes.
    with pytest.raises(InvalidTopicError):
        check_new_topic("x" * 249, 1, 1, {}, LIMITS)


def test_names_starting_with_two_underscores_are_reserved_for_the_cluster():
    assert is_internal_topic("__consumer_offsets")
    assert not is_internal_topic("_private")
    with pytest.raises(InvalidTopicError):
        check_new_topic("__consumer_offsets", 1, 1, {}, LIMITS)
    assert check_new_topic("__consumer_offsets", 3, 1, {}, LIMITS, internal=True) == (3, 1)
    with pytest.raises(InvalidTopicError):
        refuse_internal("__consumer_offsets", "clients cannot change it")
    refuse_internal("orders", "clients cannot change it")


@pytest.mark.parametrize("num_partitions", [0, -2, 11])
def test_partition_counts_outside_one_to_the_per_topic_limit_are_refused(num_partitions):
    with pytest.raises(InvalidPartitionsError):
        check_new_topic("orders", num_partitions, 1, {}, LIMITS)


@pytest.mark.parametrize("replication_factor", [0, -2, MAX_REPLICATION_FACTOR + 1])
def test_replication_factors_outside_one_to_int16_are_refused(replication_factor):
    with pytest.raises(InvalidReplicationFactorError):
        check_new_topic("orders", 1, replication_factor, {}, LIMITS)


def test_topic_configs_are_checked_by_name_and_range_before_anything_is_created():
    assert check_new_topic("orders", 1, 1, {"retention.ms": "1000"}, LIMITS) == (1, 1)
    with pytest.raises(InvalidConfigError, match="orders"):
        check_new_topic("orders", 1, 1, {"no.such.config": "1"}, LIMITS)
    with pytest.raises(InvalidConfigError):
        check_new_topic("orders", 1, 1, {"cleanup.policy": "forever"}, LIMITS)
    with pytest.raises(InvalidConfigError):
        check_new_topic("orders", 1, 1, {"min.insync.replicas": "0"}, LIMITS)


def test_partitions_only_grow_and_stay_within_the_per_topic_limit():
    check_growth("orders", 3, 4, LIMITS)
    check_growth("orders", 3, 10, LIMITS)
    for count in (3, 2):
        with pytest.raises(InvalidPartitionsError):
            check_growth("orders", 3, count, LIMITS)
    with pytest.raises(InvalidPartitionsError):
        check_growth("orders", 3, 11, LIMITS)


def test_the_cluster_wide_partition_limit_counts_existing_and_new_partitions():
    check_cluster_room(10, 20, LIMITS)  # exactly at the limit
    with pytest.raises(InvalidPartitionsError):
        check_cluster_room(11, 20, LIMITS)


def test_a_replication_factor_needs_as_many_eligible_nodes():
    check_enough_nodes(2, [1, 2])
    with pytest.raises(InvalidReplicationFactorError, match="orders"):
        check_enough_nodes(3, [1, 2], "orders")
    with pytest.raises(InvalidReplicationFactorError):
        check_enough_nodes(1, [])


def test_altered_configs_set_some_overrides_and_delete_others_back_to_the_default():
    current = {"retention.ms": "1000", "segment.bytes": "1048576"}
    result = altered_configs("orders", current, {"cleanup.policy": "compact"}, ["retention.ms"])
    assert result == {"segment.bytes": "1048576", "cleanup.policy": "compact"}
    assert current == {"retention.ms": "1000", "segment.bytes": "1048576"}  # not mutated


def test_altered_configs_are_validated_whole_and_refuse_unknown_names_even_to_delete():
    with pytest.raises(InvalidConfigError):
        altered_configs("orders", {}, {"retention.ms": "soon"}, [])
    with pytest.raises(InvalidConfigError):
        altered_configs("orders", {}, {}, ["no.such.config"])


def test_append_and_subtract_change_list_configs_from_the_override_or_kafkas_default():
    # No override yet: APPEND starts from Kafka's default, "delete".
    appended = altered_configs("orders", {}, {}, [], append={"cleanup.policy": "compact"})
    assert appended == {"cleanup.policy": "delete,compact"}
    # An item already there is not added twice; the field-name spelling is the same config.
    again = altered_configs(
        "orders", {"cleanup_policy": "compact"}, {}, [], append={"cleanup.policy": "compact"}
    )
    assert again == {"cleanup.policy": "compact"}
    subtracted = altered_configs("orders", appended, {}, [], subtract={"cleanup.policy": "delete"})
    assert subtracted == {"cleanup.policy": "compact"}


def test_append_to_a_config_that_is_no_list_or_an_invalid_item_is_refused():
    with pytest.raises(InvalidConfigError, match="retention.ms is not a list config"):
        altered_configs("orders", {}, {}, [], append={"retention.ms": "5"})
    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        altered_configs("orders", {}, {}, [], append={"cleanup.policy": "forever"})


def test_subtracting_every_item_leaves_an_empty_list_as_kafka_4_does():
    # Kafka 4's ValidList takes an empty cleanup.policy: neither compacted nor deleted.
    emptied = altered_configs("orders", {}, {}, [], subtract={"cleanup.policy": "delete"})
    assert emptied == {"cleanup.policy": ""}
    config = LogConfig().with_overrides(emptied)
    assert (config.compact, config.delete) == (False, False)
    throttled = altered_configs(
        "orders", {}, {}, [], append={"leader.replication.throttled.replicas": "0:1,1:2"}
    )
    assert throttled == {"leader.replication.throttled.replicas": "0:1,1:2"}


def test_a_config_spelled_either_way_is_replaced_or_deleted_as_one():
    current = {"retention_ms": "1000", "segment.index.bytes": "4096"}
    assert altered_configs("orders", current, {"retention.ms": "5"}, []) == {
        "segment.index.bytes": "4096",
        "retention.ms": "5",
    }
    assert altered_configs("orders", current, {}, ["index_size_max_bytes"]) == {
        "retention_ms": "1000"
    }


def test_a_tiered_topic_needs_a_cluster_with_an_object_store():
    tiered = {"remote.storage.enable": "true"}
    with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled"):
        check_new_topic("history", 1, 1, tiered, LIMITS)
    with_store = TopicLimits(default_replication_factor=2, remote_log_storage_system_enable=True)
    assert check_new_topic("history", 1, 1, tiered, with_store) == (1, 1)
    with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled"):
        altered_configs("history", {}, tiered, [])
    assert altered_configs("history", {}, tiered, [], tiered=True) == tiered


def test_tiering_is_turned_off_only_with_its_remote_data_deleted():
    tiered = {"remote.storage.enable": "true"}
    with pytest.raises(InvalidConfigError, match="without deleting remote data"):
        altered_configs("history", tiered, {"remote.storage.enable": "false"}, [], tiered=True)
    with pytest.raises(InvalidConfigError, match="without deleting remote data"):
        altered_configs("history", tiered, {}, ["remote.storage.enable"], tiered=True)
    off = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    assert altered_configs("history", tiered, off, [], tiered=True) == off
