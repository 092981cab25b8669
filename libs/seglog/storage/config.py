"""Configs: frozen dataclasses with Kafka's names (snake_case) and Kafka's defaults.

`LogConfig` is per log (topic-level overrides apply on top of the manager's defaults);
`LogManagerConfig` is per storage node. Overrides may use Kafka's dotted names
(`segment.bytes`) or the field names (`segment_bytes`); unknown keys and out-of-range
values raise InvalidConfigError. Kafka's rules for lists, codecs and levels are in
topic_config_values.py.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidConfigError
from .topic_config_values import (
    CLEANUP_COMPACT,
    CLEANUP_DELETE,
    COMPRESSION_PRODUCER,
    check_topic_config_values,
    list_items,
)

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_jitter_ms: int = 0
    index_interval_bytes: int = 4096
    index_size_max_bytes: int = 10 * 1024 * 1024  # Kafka's segment.index.bytes
    max_message_bytes: int = 1024 * 1024 + 12  # 1048588, Kafka's default
    message_timestamp_type: str = CREATE_TIME
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 60 * 60 * 1000  # Kafka 4.0's default: 1 hour
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = -1
    cleanup_policy: str = CLEANUP_DELETE
    delete_retention_ms: int = 24 * 60 * 60 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60 * 1000
    # acks=all needs this many in-sync replicas (and the high watermark stays put below it).
    min_insync_replicas: int = 1
    # seglog's own bound (Kafka has none): a batch's records section may decompress to at most
    # this many bytes when it is validated, so a small request cannot cost gigabytes.
    max_uncompressed_batch_bytes: int = 64 * 1024 * 1024
    compression_type: str = COMPRESSION_PRODUCER
    # Kafka's CompressionType defaults (KIP-390): gzip's is zlib's own default (-1, level 6).
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    # Accepted, validated, stored and described as Kafka's, with no effect in seglog
    # (topic_config_values.STORED_ONLY_CONFIGS): seglog does not preallocate segment files,
    # and elects leaders from the ISR/ELR only.
    preallocate: bool = False
    unclean_leader_election_enable: bool = False
    # Tiered storage (KIP-405; services/storage_node/remote_log_manager.py): the leader copies
    # rolled segments to the object store; local.retention.* bounds what stays on the node,
    # retention.* the total. remote.log.delete.on.disable is stored only.
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    local_retention_ms: int = -2  # Kafka's: -2 means retention.ms
    local_retention_bytes: int = -2  # Kafka's: -2 means retention.bytes
    # Kafka's throttled-replica lists: `*`, or `partition:broker` pairs, comma separated.
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    # KIP-1191: whether share groups may write dead letters here (the topic's administrator
    # opts in, so no group can point its dead letters at a business topic); read by the
    # gateway's dead-letter writer (services/gateway/share/dead_letters.py), not the log.
    errors_deadletterqueue_group_enable: bool = False

    def __post_init__(self) -> None:
        for name, (minimum, maximum) in _LOG_CONFIG_RANGES.items():
            _in_range(self, name, minimum, maximum)
        ratio = self.min_cleanable_dirty_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0.0 <= ratio <= 1.0:
            raise InvalidConfigError(
                f"min_cleanable_dirty_ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}"
            )
        check_topic_config_values(self)
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) must not exceed "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise InvalidConfigError(
                f"message_timestamp_type must be CreateTime or LogAppendTime; got "
                f"{self.message_timestamp_type!r}"
            )

    @property
    def effective_local_retention_ms(self) -> int:
        """Kafka's localRetentionMs(): -2 means retention.ms."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

    # Parsed once per config (a frozen dataclass: cached_property writes the instance's
    # __dict__, not a field): every append asks, and parsing the list each time cost ~1 us.
    @functools.cached_property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in list_items(self.cleanup_policy)

    @functools.cached_property
    def delete(self) -> bool:
        """Retention applies. An empty cleanup.policy (Kafka 4's) has neither: the log is
        neither compacted nor trimmed by time or size."""
        return CLEANUP_DELETE in list_items(self.cleanup_policy)

    @property
    def max_segment_ms(self) -> int:
        """How long a segment may stay active: `segment_ms`, capped by
        `max_compaction_lag_ms` on compacted topics so that no record waits longer than that
        in the uncleanable active segment (Kafka's LogConfig.maxSegmentMs)."""
        if self.compact:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogConfig:
        return dataclasses.replace(self, **_normalize(type(self), overrides))


@dataclass(frozen=True, kw_only=True)
class LogManagerConfig:
    log_dirs: tuple[str, ...]
    retention_check_interval_ms: int = 5 * 60 * 1000
    flush_scheduler_interval_ms: int = 1000
    flush_recovery_point_interval_ms: int = 60 * 1000
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    num_recovery_threads_per_data_dir: int = 2
    cleaner_enable: bool = True
    cleaner_backoff_ms: int = 15 * 1000
    cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024

    @classmethod
    def from_overrides(
        cls, log_dirs: tuple[str, ...], overrides: Mapping[str, Any]
    ) -> LogManagerConfig:
        return cls(log_dirs=log_dirs, **_normalize(cls, overrides))

    def __post_init__(self) -> None:
        if not self.log_dirs:
            raise InvalidConfigError("log_dirs must name at least one directory")
        for name in (
            "retention_check_interval_ms",
            "flush_scheduler_interval_ms",
            "flush_recovery_point_interval_ms",
            "replica_high_watermark_checkpoint_interval_ms",
            "num_recovery_threads_per_data_dir",
            "cleaner_backoff_ms",
        ):
            _in_range(self, name, 1, INT_MAX if name.startswith("num_") else LONG_MAX)
        # Kafka: log.cleaner.dedupe.buffer.size is a long, at least 1 MiB.
        _in_range(self, "cleaner_dedupe_buffer_size", 1024 * 1024, LONG_MAX)


# Kafka's field types and lower bounds (TopicConfig / LogConfig's ConfigDef). Fields Kafka
# types as int are int32 here too; `segment_bytes` and `index_size_max_bytes` must also fit
# the 4-byte file positions of the offset index.
_LOG_CONFIG_RANGES: dict[str, tuple[int, int]] = {
    "segment_bytes": (14, INT_MAX),  # Kafka: LegacyRecord.RECORD_OVERHEAD_V0
    "segment_ms": (1, LONG_MAX),
    "segment_jitter_ms": (0, LONG_MAX),
    "index_interval_bytes": (0, INT_MAX),
    "index_size_max_bytes": (12 * 2, INT_MAX),  # room for two time-index entries
    "max_message_bytes": (0, INT_MAX),
    "min_insync_replicas": (1, INT_MAX),
    "message_timestamp_before_max_ms": (0, LONG_MAX),
    "message_timestamp_after_max_ms": (0, LONG_MAX),
    "flush_messages": (1, LONG_MAX),
    "flush_ms": (0, LONG_MAX),
    "retention_ms": (-1, LONG_MAX),
    "retention_bytes": (-1, LONG_MAX),
    "delete_retention_ms": (0, LONG_MAX),
    "min_compaction_lag_ms": (0, LONG_MAX),
    "max_compaction_lag_ms": (1, LONG_MAX),
    "file_delete_delay_ms": (0, LONG_MAX),
    "max_uncompressed_batch_bytes": (1024, 1024 * 1024 * 1024),
    "compression_lz4_level": (1, 17),  # Kafka's LZ4 levels
    "compression_zstd_level": (-(1 << 17), 22),  # zstd-jni's min and max levels
    "local_retention_ms": (-2, LONG_MAX),
    "local_retention_bytes": (-2, LONG_MAX),
}
# Only ASCII digits with an optional minus: int() would also take " 5", "5_000" and "５".
_STRICT_INT = re.compile(r"-?[0-9]+")
_STRICT_FLOAT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _in_range(config: object, name: str, minimum: int, maximum: int) -> None:
    value = getattr(config, name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidConfigError(f"{kafka_name(name)} must be an integer, got {value!r}")
    if not minimum <= value <= maximum:
        raise InvalidConfigError(
            f"{kafka_name(name)} must be in [{minimum}, {maximum}], got {value}"
        )


def kafka_name(field_name: str) -> str:
    """A LogConfig field's Kafka topic-config name (`retention_ms` -> `retention.ms`,
    `index_size_max_bytes` -> `segment.index.bytes`): errors and descriptions speak Kafka's."""
    return _KAFKA_NAMES.get(field_name, field_name.replace("_", "."))


def field_name(key: str) -> str:
    """The LogConfig field a config name means, whichever spelling it has (`retention.ms`,
    `retention_ms`, `segment.index.bytes`); a name no field has comes back underscored."""
    name = key.replace(".", "_")
    return _FIELDS_BY_KAFKA_NAME.get(name, name)


# The one field whose name is not Kafka's with underscores; the reverse maps Kafka's name in.
_KAFKA_NAMES = {"index_size_max_bytes": "segment.index.bytes"}
_FIELDS_BY_KAFKA_NAME = {v.replace(".", "_"): k for k, v in _KAFKA_NAMES.items()}


def parse_int(key: str, value: str) -> int:
    if not _STRICT_INT.fullmatch(value):
        raise InvalidConfigError(f"{key} must be an integer (ASCII digits), got {value!r}")
    return int(value)


def parse_float(key: str, value: str) -> float:
    if not _STRICT_FLOAT.fullmatch(value):
        raise InvalidConfigError(f"{key} must be a decimal number, got {value!r}")
    return float(value)


def _normalize(cls: type, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted or snake_case names to field names; string values to the field's type."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        name = field_name(key)
        if name not in names:
            raise InvalidConfigError(f"unknown config {key!r}")
        field_type = names[name].type
        if isinstance(value, str) and field_type in ("int", "float"):
            value = parse_int(key, value) if field_type == "int" else parse_float(key, value)
        elif isinstance(value, str) and field_type == "bool":
            if value.lower() not in ("true", "false"):
                raise InvalidConfigError(f"{key} must be true or false, got {value!r}")
            value = value.lower() == "true"
        out[name] = value
    return out


def described_configs(
    node_defaults: Mapping[str, Any], topic_overrides: Mapping[str, Any]
) -> list[tuple[str, str, str]]:
    """Every topic config as (Kafka name, effective value, source), the source being where
    the value comes from: the topic's override, the node's default, or Kafka's default."""
    defaults = LogConfig()
    node = _normalize(LogConfig, node_defaults)
    topic = _normalize(LogConfig, topic_overrides)
    out = []
    for field in dataclasses.fields(LogConfig):
        name = field.name
        if name in topic:
            value, source = topic[name], "topic"
        elif name in node:
            value, source = node[name], "node"
        else:
            value, source = getattr(defaults, name), "default"
        out.append((kafka_name(name), config_text(value), source))
    return sorted(out)


def config_text(value: Any) -> str:
    """A config's value as Kafka shows it (booleans in lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_config_names(names: Iterable[str]) -> None:
    """INVALID_CONFIG for a name that is no topic config (Kafka's or its field name)."""
    _normalize(LogConfig, dict.fromkeys(names))
