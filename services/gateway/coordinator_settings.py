"""The coordinators' settings, declared once: the group coordinator's (classic and KIP-848
consumer groups, their committed offsets in __consumer_offsets), the share coordinator's
(KIP-932 share groups) and the transaction coordinator's. GatewayConfig (settings.py) holds
them as fields under these names, in its own order, so their flags, defaults, properties
names and DescribeConfigs output are those of every other setting."""

from __future__ import annotations

from services.settings import setting

from .groups.consumer_groups import (
    DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS,
    DEFAULT_CONSUMER_SESSION_TIMEOUT_MS,
)
from .groups.coordinator import (
    DEFAULT_GROUP_MAX_SIZE,
    DEFAULT_INITIAL_REBALANCE_DELAY_MS,
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    DEFAULT_MIN_SESSION_TIMEOUT_MS,
)
from .groups.group_migration import DEFAULT_MIGRATION_POLICY, MIGRATION_POLICIES
from .groups.offsets_store import (
    DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    DEFAULT_OFFSETS_RETENTION_MINUTES,
    DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
)
from .share.settings import (
    DEFAULT_DELIVERY_COUNT_LIMIT,
    DEFAULT_DLQ_TOPIC_PREFIX,
    DEFAULT_RECORD_LOCK_DURATION_MS,
    DEFAULT_STATE_TOPIC_NUM_PARTITIONS,
    EARLIEST,
    LATEST,
)
from .share.settings import DEFAULT_SESSION_TIMEOUT_MS as DEFAULT_SHARE_SESSION_TIMEOUT_MS

offsets_topic_num_partitions = setting(
    DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
    "partitions of __consumer_offsets, fixed when it is first created",
)

transaction_state_log_num_partitions = setting(
    50, "partitions of __transaction_state, fixed when it is first created"
)

transaction_max_timeout_ms = setting(
    900_000,
    "the longest transaction.timeout.ms a transactional producer may ask for "
    "(longer: INVALID_TRANSACTION_TIMEOUT)",
)

transaction_abort_timed_out_transaction_cleanup_interval_ms = setting(
    10_000, "how often timed-out transactions are aborted (and orphaned ones taken up)"
)

group_initial_rebalance_delay_ms = setting(
    DEFAULT_INITIAL_REBALANCE_DELAY_MS,
    "how long a new group waits for more members before its first assignment",
)

group_min_session_timeout_ms = setting(
    DEFAULT_MIN_SESSION_TIMEOUT_MS, "the shortest consumer session timeout accepted"
)

group_max_session_timeout_ms = setting(
    DEFAULT_MAX_SESSION_TIMEOUT_MS, "the longest consumer session timeout accepted", flags=()
)

group_max_size = setting(
    DEFAULT_GROUP_MAX_SIZE,
    "the most members one consumer group may have (Kafka's default is 2^31 - 1); a new "
    "member past it gets GROUP_MAX_SIZE_REACHED",
)

group_consumer_session_timeout_ms = setting(
    DEFAULT_CONSUMER_SESSION_TIMEOUT_MS,
    "a KIP-848 consumer group member's session (group.protocol=consumer): one that sends "
    "no heartbeat for this long is removed and its partitions go to others",
)

group_consumer_heartbeat_interval_ms = setting(
    DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS,
    "how often KIP-848 consumer group members are told to heartbeat (their "
    "assignments change only on a heartbeat)",
)

group_consumer_migration_policy = setting(
    DEFAULT_MIGRATION_POLICY,
    "which online conversions between classic and KIP-848 consumer groups are done: a "
    "consumer-protocol member joining a classic group (upgrade), the last one leaving "
    "(downgrade), both, or neither (Kafka's group.consumer.migration.policy)",
    choices=MIGRATION_POLICIES,
)

group_share_record_lock_duration_ms = setting(
    DEFAULT_RECORD_LOCK_DURATION_MS,
    "how long a share group member holds the records a ShareFetch acquired for it before "
    "they can go to another member",
)

group_share_delivery_count_limit = setting(
    DEFAULT_DELIVERY_COUNT_LIMIT,
    "deliveries of a record to a share group before it is archived (2..10)",
)

group_share_session_timeout_ms = setting(
    DEFAULT_SHARE_SESSION_TIMEOUT_MS,
    "how long a share group member may go without a heartbeat before it is dropped and "
    "its records released",
    flags=(),
)

share_auto_offset_reset = setting(
    LATEST,
    "where a share group starts reading a partition it has no state for, unless the group's "
    "own config share.auto.offset.reset says otherwise",
    choices=(LATEST, EARLIEST),
)

share_coordinator_state_topic_num_partitions = setting(
    DEFAULT_STATE_TOPIC_NUM_PARTITIONS,
    "partitions of __share_group_state, fixed when it is first created",
)

errors_deadletterqueue_topic_name = setting(
    "",
    "the share groups' default dead-letter topic (KIP-1191): records rejected or archived at "
    "the delivery count limit are copied there; a group's own config of this name wins "
    "(kafka-configs --entity-type groups); empty: none",
)

errors_deadletterqueue_topic_name_prefix = setting(
    DEFAULT_DLQ_TOPIC_PREFIX,
    "what a dead-letter topic's name must start with, so that no share group writes to a "
    "business topic",
)

errors_deadletterqueue_auto_create_topics_enable = setting(
    False, "create a share group's dead-letter topic when it is first needed"
)

errors_deadletterqueue_copy_record_enable = setting(
    False,
    "dead letters carry the source record's key and value (the default of the group config "
    "of this name); otherwise only the headers saying where it came from",
)

offsets_retention_minutes = setting(
    DEFAULT_OFFSETS_RETENTION_MINUTES,
    "committed offsets of empty groups are deleted after this long (Kafka's default)",
)

offsets_retention_check_interval_ms = setting(
    DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    "how often expired committed offsets are looked for",
)

offsets_topic_replication_factor = setting(
    3, "replicas of __consumer_offsets (fewer when fewer nodes are live at its creation)"
)
