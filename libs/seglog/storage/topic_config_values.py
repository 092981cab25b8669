"""Kafka's topic-config rules beyond integer ranges (LogConfig's ConfigDef validators in
Kafka's storage module): LIST values (`cleanup.policy`, the throttled-replica lists; Kafka 4's
ValidList takes an empty list but no empty or repeated item), `compression.type` and its
levels, what tiered storage would need; and what describes them as Kafka does: each topic
config's type and broker synonym, and which configs seglog stores without acting on them."""

from __future__ import annotations

import re
from typing import Any, Protocol

from ..errors import InvalidConfigError


class CheckedConfig(Protocol):
    """What the checks below read of a topic's config (LogConfig has them all); named here
    rather than imported, so config.py can use this module without a circle."""

    @property
    def cleanup_policy(self) -> str: ...

    @property
    def compression_type(self) -> str: ...

    @property
    def compression_gzip_level(self) -> int: ...

    @property
    def leader_replication_throttled_replicas(self) -> str: ...

    @property
    def follower_replication_throttled_replicas(self) -> str: ...

    @property
    def remote_storage_enable(self) -> bool: ...

    @property
    def remote_log_copy_disable(self) -> bool: ...

    @property
    def retention_ms(self) -> int: ...

    @property
    def retention_bytes(self) -> int: ...

    @property
    def local_retention_ms(self) -> int: ...

    @property
    def local_retention_bytes(self) -> int: ...


CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
_CLEANUP_POLICIES = (CLEANUP_COMPACT, CLEANUP_DELETE)
# Kafka's BrokerCompressionType: `producer` keeps the producer's codec, any other recompresses
# what a producer sent in another codec (storage/recompression.py).
COMPRESSION_PRODUCER = "producer"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", COMPRESSION_PRODUCER)

# Topic configs seglog accepts, validates, stores and describes as Kafka does, but does not act
# on (README: "Topic configs"): no preallocated segment files, leaders only from the ISR or
# ELR, replication throttles set per reassignment, not per replica list, no deletion of remote
# data when tiering is turned off.
STORED_ONLY_CONFIGS = frozenset(
    {
        "preallocate",
        "unclean.leader.election.enable",
        "remote.log.delete.on.disable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)


# The topic configs Kafka types as LIST (the ones IncrementalAlterConfigs' APPEND and SUBTRACT
# apply to) and as INT (int32); every other numeric one is a LONG (or cleanup ratio a DOUBLE).
LIST_CONFIG_FIELDS = frozenset(
    {
        "cleanup_policy",
        "leader_replication_throttled_replicas",
        "follower_replication_throttled_replicas",
    }
)
INT_CONFIG_FIELDS = frozenset(
    {
        "segment_bytes",
        "index_size_max_bytes",
        "max_message_bytes",
        "index_interval_bytes",
        "min_insync_replicas",
        "compression_gzip_level",
        "compression_lz4_level",
        "compression_zstd_level",
    }
)


def list_items(value: str) -> list[str]:
    """A LIST config's items as Kafka's ConfigDef parses them: trimmed, split on commas with
    the spaces around them; an empty value is an empty list. Empty items are kept (to be
    refused); trailing ones go, as Java's String.split drops them."""
    text = value.strip()
    if not text:
        return []
    items = [item.strip() for item in text.split(",")]
    while items and not items[-1]:
        items.pop()
    return items


def check_topic_config_values(config: CheckedConfig) -> None:
    """Kafka's validators (LogConfig's ConfigDef) for the topic configs that are not a range
    of integers: lists, enumerations, levels, and what tiered storage would need."""
    _check_list(
        "cleanup.policy",
        config.cleanup_policy,
        lambda item: item in _CLEANUP_POLICIES,
        "[compact, delete]",
    )
    if config.compression_type not in COMPRESSION_TYPES:
        raise InvalidConfigError(
            f"Invalid value {config.compression_type} for configuration compression.type: "
            f"String must be one of: {', '.join(COMPRESSION_TYPES)}"
        )
    level = config.compression_gzip_level
    if (
        isinstance(level, bool)
        or not isinstance(level, int)
        or not (level == -1 or 1 <= level <= 9)
    ):
        raise InvalidConfigError(
            f"Invalid value {level} for configuration compression.gzip.level: "
            f"Value must be between 1 and 9, or -1 (the default)"
        )
    for name in ("leader", "follower"):
        value = getattr(config, f"{name}_replication_throttled_replicas")
        _check_throttled_replicas(f"{name}.replication.throttled.replicas", value)
    if config.remote_storage_enable:
        _check_tiered(config)


def _check_tiered(config: CheckedConfig) -> None:
    """Kafka's LogConfig checks of a topic with remote.storage.enable=true (whether the cluster
    has tiered storage at all is the gateway's check: its remote.log.storage.system.enable)."""
    policy = list_items(config.cleanup_policy)
    if policy and policy != [CLEANUP_DELETE]:
        raise InvalidConfigError(
            "Remote log storage only supports topics with cleanup.policy=delete or "
            "cleanup.policy being an empty list."
        )
    for unit, total, local in (
        ("bytes", config.retention_bytes, config.local_retention_bytes),
        ("ms", config.retention_ms, config.local_retention_ms),
    ):
        # -2: the local retention is the total one; -1 locally with a bounded total is refused.
        if total != -1 and local != -2:
            if local == -1:
                raise InvalidConfigError(
                    f"Invalid value -1 for configuration local.retention.{unit}: Value must "
                    f"not be -1 as retention.{unit} value is set as {total}."
                )
            if local > total:
                raise InvalidConfigError(
                    f"Invalid value {local} for configuration local.retention.{unit}: Value "
                    f"must not be more than retention.{unit} property value: {total}"
                )
        if config.remote_log_copy_disable and local not in (-2, total):
            raise InvalidConfigError(
                f"When `remote.log.copy.disable` is set to true, the `local.retention.{unit}` "
                f"and `retention.{unit}` must be set to the identical value because there will "
                "be no more logs copied to the remote storage."
            )


def _check_list(name: str, value: str, valid: Any, allowed: str) -> None:
    items = list_items(value)
    for item in items:
        if not item:
            raise InvalidConfigError(f"Configuration '{name}' values must not be empty: {value!r}")
        if not valid(item):
            raise InvalidConfigError(
                f"Invalid value {item} for configuration {name}: String must be one of: {allowed}"
            )
    if len(set(items)) != len(items):
        raise InvalidConfigError(f"Configuration '{name}' values must not be duplicated: {value}")


_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def _check_throttled_replicas(name: str, value: str) -> None:
    """Kafka's ThrottledReplicaListValidator: `*` alone, or `partition:broker` pairs."""
    items = list_items(value)
    if items == ["*"]:
        return
    if not all(_THROTTLED_REPLICA.fullmatch(item) for item in items):
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: must be the literal '*' or a "
            f"list of replicas in the following format: "
            f"[partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )


# Kafka's ServerTopicConfigSynonyms: the broker config each topic config defaults from, as
# DescribeConfigs names it among a topic config's synonyms (`log.cleanup.policy`). Topic
# configs not listed have no broker synonym (the throttled-replica lists, remote.*).
BROKER_SYNONYMS = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "max.message.bytes": "message.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "cleanup.policy": "log.cleanup.policy",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "preallocate": "log.preallocate",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
}
