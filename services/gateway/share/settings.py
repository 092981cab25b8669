"""Share groups' settings, Kafka's broker config names in snake_case (units last).

These are the defaults: a group's own configs (share.auto.offset.reset,
share.record.lock.duration.ms, share.delivery.count.limit, ...: cluster/group_configs.py) win
over them."""

from __future__ import annotations

from dataclasses import dataclass

LATEST, EARLIEST = "latest", "earliest"

# Kafka's defaults (GroupConfig / ShareGroupConfig, Kafka 4.3).
DEFAULT_RECORD_LOCK_DURATION_MS = 30_000
DEFAULT_DELIVERY_COUNT_LIMIT = 5
DEFAULT_PARTITION_MAX_RECORD_LOCKS = 2000
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000
DEFAULT_SESSION_TIMEOUT_MS = 45_000
DEFAULT_STATE_TOPIC_NUM_PARTITIONS = 50
DEFAULT_MAX_GROUPS = 10
DEFAULT_DLQ_TOPIC_PREFIX = "dlq."  # errors.deadletterqueue.topic.name.prefix (KIP-1191)
DEFAULT_MAX_SIZE = 200  # group.share.max.size: members of one share group


@dataclass(frozen=True)
class ShareSettings:
    group_share_record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS
    group_share_delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT
    # In-flight records (acquired or waiting for redelivery) of one share partition: a fetch
    # acquires nothing past it, so what one partition holds in memory is bounded.
    group_share_partition_max_record_locks: int = DEFAULT_PARTITION_MAX_RECORD_LOCKS
    group_share_heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    group_share_session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    group_share_max_size: int = DEFAULT_MAX_SIZE
    share_auto_offset_reset: str = LATEST
    share_coordinator_state_topic_num_partitions: int = DEFAULT_STATE_TOPIC_NUM_PARTITIONS
    # KIP-1191's dead-letter topic (dead_letters.py): the defaults of its two group configs
    # (topic name, "": none; copy record), and its two cluster configs.
    errors_deadletterqueue_topic_name: str = ""
    errors_deadletterqueue_topic_name_prefix: str = DEFAULT_DLQ_TOPIC_PREFIX
    errors_deadletterqueue_auto_create_topics_enable: bool = False
    errors_deadletterqueue_copy_record_enable: bool = False

    def __post_init__(self) -> None:
        if self.share_auto_offset_reset not in (LATEST, EARLIEST):
            raise ValueError(
                f"share.auto.offset.reset must be latest or earliest, "
                f"not {self.share_auto_offset_reset!r}"
            )
        if not 2 <= self.group_share_delivery_count_limit <= 10:
            raise ValueError("group.share.delivery.count.limit must be within 2..10 (Kafka's)")
        name, prefix = (
            self.errors_deadletterqueue_topic_name,
            self.errors_deadletterqueue_topic_name_prefix,
        )
        if name and not name.startswith(prefix):
            raise ValueError(
                f"errors.deadletterqueue.topic.name {name!r} must start with "
                f"errors.deadletterqueue.topic.name.prefix {prefix!r}"
            )
        if self.group_share_record_lock_duration_ms < 1000:
            raise ValueError("group.share.record.lock.duration.ms must be at least 1000")
