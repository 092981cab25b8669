"""Configs are parsed strictly and range-checked with Kafka's types and bounds."""

from __future__ import annotations

import pytest

from seglog.errors import InvalidConfigError
from seglog.storage import LogConfig, LogManagerConfig


@pytest.mark.parametrize("text", [" 5", "5 ", "5_000", "+5", "５", "٥", "0x10", "5.0", "", "1e3"])
def test_integer_configs_take_only_plain_ascii_digits(text):
    with pytest.raises(InvalidConfigError, match="segment.ms must be an integer"):
        LogConfig().with_overrides({"segment.ms": text})


def test_plain_integers_and_negative_sentinels_parse():
    config = LogConfig().with_overrides({"segment.ms": "5000", "retention.ms": "-1"})
    assert (config.segment_ms, config.retention_ms) == (5000, -1)


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("segment.bytes", str(1 << 31), "2147483647"),  # int32 in Kafka
        ("segment.bytes", "13", "14"),
        ("segment.index.bytes", str(1 << 40), "2147483647"),  # fits 4-byte positions
        ("index.interval.bytes", str(1 << 31), "2147483647"),
        ("max.message.bytes", str(1 << 31), "2147483647"),
        ("segment.ms", str(1 << 63), "9223372036854775807"),  # int64
        ("retention.ms", "-2", "-1"),
        ("flush.messages", "0", "1"),
    ],
)
def test_numeric_configs_are_range_checked_with_kafkas_types(key, value, bound):
    with pytest.raises(InvalidConfigError, match=rf"{key} must be in \[.*{bound}.*\]"):
        LogConfig().with_overrides({key: value})


@pytest.mark.parametrize("text", ["nan", "inf", " 0.5", "0,5", "1.5", "-0.1"])
def test_the_dirty_ratio_is_a_plain_decimal_in_0_to_1(text):
    with pytest.raises(InvalidConfigError, match="min"):
        LogConfig().with_overrides({"min.cleanable.dirty.ratio": text})


def test_manager_configs_are_bounded_too():
    with pytest.raises(InvalidConfigError, match="cleaner.dedupe.buffer.size"):
        LogManagerConfig.from_overrides(("d",), {"cleaner_dedupe_buffer_size": "1024"})
    with pytest.raises(InvalidConfigError, match="must be an integer"):
        LogManagerConfig.from_overrides(("d",), {"cleaner_backoff_ms": "1_000"})


# Kafka 4.3's topic configs (LogConfig's ConfigDef), each accepted with a valid value.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "compression.gzip.level": "9",
    "compression.lz4.level": "17",
    "compression.type": "zstd",
    "compression.zstd.level": "-7",
    "delete.retention.ms": "1",
    "file.delete.delay.ms": "1",
    "flush.messages": "1",
    "flush.ms": "1",
    "follower.replication.throttled.replicas": "*",
    "index.interval.bytes": "1",
    "leader.replication.throttled.replicas": "0:1, 1:2",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "1",
    "max.message.bytes": "1",
    "message.timestamp.after.max.ms": "1",
    "message.timestamp.before.max.ms": "1",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.1",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "2",
    "preallocate": "true",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false",
    "retention.bytes": "1",
    "retention.ms": "1",
    "segment.bytes": "1048576",
    "segment.index.bytes": "4096",
    "segment.jitter.ms": "1",
    "segment.ms": "1",
    "unclean.leader.election.enable": "true",
}


def test_every_kafka_topic_config_is_accepted_and_described():
    from seglog.storage.config import described_configs

    config = LogConfig().with_overrides(KAFKA_TOPIC_CONFIGS)
    assert config.compression_type == "zstd" and config.preallocate is True
    described = {name: (value, source) for name, value, source in described_configs({}, {})}
    assert set(KAFKA_TOPIC_CONFIGS) <= set(described)
    assert described["compression.type"] == ("producer", "default")
    assert described["preallocate"] == ("false", "default")  # Kafka's spelling of booleans
    assert described["local.retention.ms"] == ("-2", "default")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("compression.type", "brotli", "compression.type"),
        ("compression.type", "ZSTD", "compression.type"),  # Kafka's names are lower case
        ("compression.gzip.level", "0", "compression.gzip.level"),
        ("compression.gzip.level", "10", "compression.gzip.level"),
        ("compression.lz4.level", "18", "compression.lz4.level"),
        ("compression.zstd.level", "23", "compression.zstd.level"),
        ("cleanup.policy", "compact,compact", "duplicated"),
        ("cleanup.policy", "compact,,delete", "empty"),
        ("cleanup.policy", "forever", "cleanup.policy"),
        ("leader.replication.throttled.replicas", "0-1", "partitionId"),
        ("follower.replication.throttled.replicas", "*,0:1", "partitionId"),
        ("local.retention.ms", "-3", "local.retention.ms"),
        ("preallocate", "yes", "preallocate"),
    ],
)
def test_topic_configs_are_refused_as_kafkas_validators_refuse_them(key, value, message):
    with pytest.raises(InvalidConfigError, match=message):
        LogConfig().with_overrides({key: value})


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"cleanup.policy": "compact"}, "Remote log storage only supports"),
        ({"cleanup.policy": "compact,delete"}, "Remote log storage only supports"),
        ({"local.retention.ms": "-1"}, "must not be -1 as retention.ms"),
        ({"retention.ms": "1000", "local.retention.ms": "2000"}, "must not be more than"),
        ({"retention.bytes": "1000", "local.retention.bytes": "-1"}, "must not be -1"),
        ({"retention.bytes": "1000", "local.retention.bytes": "1001"}, "must not be more than"),
        ({"remote.log.copy.disable": "true", "local.retention.ms": "5"}, "identical value"),
    ],
)
def test_a_tiered_topics_configs_are_checked_as_kafkas(configs, message):
    with pytest.raises(InvalidConfigError, match=message):
        LogConfig().with_overrides({"remote.storage.enable": "true", **configs})
    # The same values are fine on a topic that is not tiered (Kafka checks them only then).
    LogConfig().with_overrides(configs)


@pytest.mark.parametrize(
    "configs",
    [
        {},
        {"cleanup.policy": ""},
        {"retention.ms": "1000", "local.retention.ms": "1000"},
        {"retention.bytes": "-1", "local.retention.bytes": "-1"},
        {"retention.bytes": "1000", "local.retention.bytes": "0"},
        {"remote.log.copy.disable": "true"},
    ],
)
def test_a_tiered_topic_takes_what_kafka_takes(configs):
    config = LogConfig().with_overrides({"remote.storage.enable": "true", **configs})
    assert config.remote_storage_enable
    # -2: the local retention is the total one (Kafka's localRetentionMs/Bytes).
    local_ms = config.local_retention_ms
    assert config.effective_local_retention_ms == (
        config.retention_ms if local_ms == -2 else local_ms
    )


@pytest.mark.parametrize("value", ["", " ", "delete", "compact", "delete, compact"])
def test_cleanup_policy_is_a_list_and_may_be_empty(value):
    config = LogConfig().with_overrides({"cleanup.policy": value})
    assert config.delete == ("delete" in value)
    assert config.compact == ("compact" in value)
