"""What CreateTopics, CreatePartitions and IncrementalAlterConfigs may do, checked whole
before the registry changes anything: names, partition counts against the per-topic and
cluster limits, replication factors against the live nodes, topic configs (Kafka's
defaults and ranges). Pure functions of the request and the registry's numbers; the
registry (registry.py) calls them under its lock."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from seglog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
)
from seglog.storage import LogConfig, log_files
from seglog.storage.config import check_config_names, field_name, kafka_name
from seglog.storage.topic_config_values import LIST_CONFIG_FIELDS, list_items

DEFAULT_NUM_PARTITIONS = 1
# Kafka's controller refuses one operation creating more than 10,000 partitions
# (QuorumController.MAX_RECORDS_PER_USER_OP). The cluster-wide bound keeps the whole cluster
# within what its nodes can hold open (each partition holds at least three files open).
DEFAULT_MAX_PARTITIONS_PER_TOPIC = 10_000
DEFAULT_MAX_PARTITIONS = 20_000
DEFAULT_REPLICATION_FACTOR = 1
MAX_REPLICATION_FACTOR = 32767  # Kafka's: an int16


@dataclass(frozen=True)
class TopicLimits:
    max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC
    max_partitions: int = DEFAULT_MAX_PARTITIONS
    default_replication_factor: int = DEFAULT_REPLICATION_FACTOR
    # Kafka's num.partitions: a topic created with -1, or auto-created.
    num_partitions: int = DEFAULT_NUM_PARTITIONS
    # Kafka's remote.log.storage.system.enable: whether topics may be tiered at all.
    remote_log_storage_system_enable: bool = False


def is_internal_topic(name: str) -> bool:
    """`__consumer_offsets` and any other `__` topic: written only by the cluster itself."""
    return name.startswith("__")


def check_new_topic(
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    limits: TopicLimits,
    *,
    internal: bool = False,
) -> tuple[int, int]:
    """The request's own checks; returns (partitions, replication factor) with the defaults
    applied for -1. Only the gateway itself (`internal`) creates `__` topics."""
    log_files.check_topic_name(name)
    if is_internal_topic(name) and not internal:
        raise InvalidTopicError(
            f"topic {name!r}: names starting with '__' are reserved for internal topics"
        )
    if num_partitions == -1:
        num_partitions = limits.num_partitions
    if not 1 <= num_partitions <= limits.max_partitions_per_topic:
        raise InvalidPartitionsError(
            f"num_partitions must be in [1, {limits.max_partitions_per_topic}] "
            f"(the gateway's --max-partitions-per-topic), got {num_partitions}"
        )
    log_files.check_directory_name_fits(name, num_partitions)
    if replication_factor == -1:
        replication_factor = limits.default_replication_factor
    if not 1 <= replication_factor <= MAX_REPLICATION_FACTOR:
        raise InvalidReplicationFactorError(
            f"replication factor must be in [1, {MAX_REPLICATION_FACTOR}] (or -1 for the "
            f"gateway's default.replication.factor), got {replication_factor}"
        )
    try:
        config = LogConfig().with_overrides(configs)
    except (InvalidConfigError, TypeError, ValueError) as exc:
        raise InvalidConfigError(f"topic {name}: {exc}") from None
    _check_tiering_allowed(name, config, limits.remote_log_storage_system_enable)
    return num_partitions, replication_factor


def _check_tiering_allowed(name: str, config: LogConfig, system_enabled: bool) -> None:
    """Kafka's validateRemoteStorageOnlyIfSystemEnabled (the gateway's setting stands for the
    brokers' remote.log.storage.system.enable)."""
    if config.remote_storage_enable and not system_enabled:
        raise InvalidConfigError(
            f"topic {name}: Tiered Storage functionality is disabled in the broker. Topic "
            "cannot be configured with remote log storage."
        )


def _check_turning_off(name: str, before: LogConfig, after: LogConfig) -> None:
    """Kafka's validateTurningOffRemoteStorageWithDelete: tiering is turned off only with the
    remote data's deletion asked for."""
    turned_off = before.remote_storage_enable and not after.remote_storage_enable
    if turned_off and not after.remote_log_delete_on_disable:
        raise InvalidConfigError(
            f"topic {name}: It is invalid to disable remote storage without deleting "
            "remote data. If you want to keep the remote data and turn to read only, please "
            "set `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
            "disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
        )


def refuse_internal(name: str, why: str) -> None:
    """Clients change no internal topic (checked before the topic is even looked up)."""
    if is_internal_topic(name):
        raise InvalidTopicError(f"topic {name!r} is internal: {why}")


def check_growth(name: str, current: int, count: int, limits: TopicLimits) -> None:
    """CreatePartitions' own checks: the count only grows, within the per-topic limit."""
    if count <= current:
        raise InvalidPartitionsError(
            f"topic {name} has {current} partitions: the count can only grow, not become {count}"
        )
    if count > limits.max_partitions_per_topic:
        raise InvalidPartitionsError(
            f"{count} partitions pass the limit of {limits.max_partitions_per_topic} per "
            f"topic (the gateway's --max-partitions-per-topic)"
        )
    log_files.check_directory_name_fits(name, count)


def check_cluster_room(more: int, existing: int, limits: TopicLimits) -> None:
    if existing + more > limits.max_partitions:
        raise InvalidPartitionsError(
            f"{more} more partitions would make {existing + more} in the cluster, over its "
            f"limit of {limits.max_partitions} (the gateway's --max-partitions)"
        )


def check_enough_nodes(
    replication_factor: int,
    eligible: list[int],
    topic: str | None = None,
    decommissioned: Collection[int] = (),
) -> None:
    if len(eligible) >= replication_factor:
        return
    what = (
        f"replication factor {replication_factor} is larger than"
        if topic is None
        else f"topic {topic} has replication factor {replication_factor}, larger than"
    )
    aside = (
        f"; decommissioned, taking no new replica: {sorted(decommissioned)}"
        if decommissioned
        else ""
    )
    raise InvalidReplicationFactorError(
        f"{what} the {len(eligible)} live storage nodes ({eligible}{aside})"
    )


def altered_configs(
    name: str,
    current: dict[str, str],
    set_configs: dict[str, str],
    delete: list[str],
    *,
    append: Mapping[str, str] | None = None,
    subtract: Mapping[str, str] | None = None,
    tiered: bool = False,
) -> dict[str, str]:
    """IncrementalAlterConfigs' result, validated whole: some overrides set, others deleted
    (back to the node's or Kafka's default), list configs (`cleanup.policy`) appended to or
    subtracted from, each a comma-separated list of items."""
    # Overrides are kept under the names they were given: a name spelled either way
    # (`retention.ms`, `retention_ms`) deletes or replaces the same config.
    replaced = {field_name(k) for k in [*delete, *set_configs]}
    configs = {k: v for k, v in current.items() if field_name(k) not in replaced}
    configs.update(set_configs)
    try:
        check_config_names(delete)
        for key, items in (append or {}).items():
            old = _list_value(configs, key)
            _set_list(configs, key, old + [i for i in _items(items) if i not in old])
        for key, items in (subtract or {}).items():
            removed = set(_items(items))
            _set_list(configs, key, [i for i in _list_value(configs, key) if i not in removed])
        after = LogConfig().with_overrides(configs)
        before = LogConfig().with_overrides(current)
    except (InvalidConfigError, TypeError, ValueError) as exc:
        raise InvalidConfigError(f"topic {name}: {exc}") from None
    _check_tiering_allowed(name, after, tiered)
    _check_turning_off(name, before, after)
    return configs


def _list_value(configs: dict[str, str], key: str) -> list[str]:
    """The list config's items now: the topic's override (under either spelling of its
    name), else Kafka's default, as Kafka's APPEND and SUBTRACT start from."""
    field = field_name(key)
    if field not in LIST_CONFIG_FIELDS:
        raise InvalidConfigError(
            f"{key} is not a list config: APPEND and SUBTRACT apply only to "
            f"{', '.join(kafka_name(f) for f in sorted(LIST_CONFIG_FIELDS))}"
        )
    for name, value in configs.items():
        if field_name(name) == field:
            return _items(value)
    return _items(str(getattr(LogConfig(), field)))


def _set_list(configs: dict[str, str], key: str, items: list[str]) -> None:
    field = field_name(key)
    for name in [n for n in configs if field_name(n) == field]:
        del configs[name]
    configs[key] = ",".join(items)


def _items(value: str) -> list[str]:
    return [item for item in list_items(value) if item]
