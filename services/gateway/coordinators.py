"""Builds the gateway's coordinators over its planes: the group coordinator (classic groups and
KIP-848 consumer groups, their committed offsets in __consumer_offsets), the share group
coordinator (KIP-932) and the transaction coordinator, wired to one another as Kafka's are
(transactions write groups' offsets; share groups and consumer groups see classic groups).
server.py, the composition root, hands it the planes and keeps what it builds. Also the
periodic expiry of committed offsets (offsets.retention.minutes), which needs the groups."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from seglog.security.tls import channel_credentials

from .authorization import Authorization
from .cluster import group_configs as gc
from .cluster.group_configs import GroupConfigs
from .cluster.producer_ids import ProducerIds
from .cluster.registry import Registry
from .cluster.topic_admin import TopicAdmin
from .coordination.gateway_session import GatewaySession
from .coordination.group_coordinators import EtcdCoordination, SoleCoordinator
from .groups.classic_handover import ClassicHandover
from .groups.consumer_groups import ConsumerGroups, ConsumerGroupsConfig
from .groups.coordinator import CoordinatorConfig, GroupCoordinator
from .groups.group_calls import GroupCalls
from .groups.group_service import GroupCoordinatorService
from .groups.groups_core import GroupsCore
from .groups.membership import GroupMembership
from .groups.offsets_store import OffsetsStore
from .node_connections import NodeConnections
from .routing.data_plane import DataPlane
from .settings import GatewayConfig
from .share.dead_letters import DLQ_GROUP_ENABLE
from .share.forwarding import ShareStateService
from .share.share_core import ShareGroups
from .share.share_group_log import ShareGroupLog
from .share.wiring import share_groups
from .transactions.batch_verification import GrpcProduceVerification
from .transactions.coordinator import settings_from
from .transactions.transactions_core import TransactionsCore
from .transactions.txn_service import TransactionCoordinatorService

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Coordinators:
    offsets: OffsetsStore
    coordinator: GroupCoordinator
    groups: GroupsCore
    consumer_groups: ConsumerGroups
    membership: GroupMembership
    share: ShareGroups
    share_state: ShareStateService  # other gateways' calls on the share partitions held here
    transactions: TransactionsCore
    group_calls: GroupCalls
    group_service: GroupCoordinatorService
    txn_service: TransactionCoordinatorService
    # KIP-890's check of the gRPC Produce's transactional batches (the gateway hands it to
    # its routing, which may not reach up to the coordinators itself).
    produce_verification: GrpcProduceVerification


def build_coordinators(
    config: GatewayConfig,
    registry: Registry,
    connections: NodeConnections,
    authorization: Authorization,
    topic_admin: TopicAdmin,
    producer_ids: ProducerIds,
    data_plane: DataPlane,
    *,
    coordination: EtcdCoordination | SoleCoordinator,
    txn_coordination: EtcdCoordination | SoleCoordinator,
    is_controller: Callable[[], bool],
    share_coordination: EtcdCoordination | SoleCoordinator | None = None,
    gateway_session: GatewaySession | None = None,
) -> Coordinators:
    """The coordinators, from the config's group, share group and transaction settings;
    `is_controller` tells whether this gateway lists unclaimed groups and adopts orphaned
    transactions; `share_coordination` places share partitions, whose holders' internal
    listeners `gateway_session` publishes."""
    group_configs = GroupConfigs(
        registry,
        authorization,
        group_config_defaults(config),
        config.share_settings.errors_deadletterqueue_topic_name_prefix,
    )
    offsets = OffsetsStore(
        registry,
        connections,
        topic_admin.create_internal_topic,
        num_partitions=config.offsets_topic_num_partitions,
    )
    topic_admin.topic_deleted_listeners.append(offsets.delete_topic_offsets)
    coordinator = GroupCoordinator(
        registry,
        CoordinatorConfig(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_max_size=config.group_max_size,
        ),
        persist=offsets.store_group,
        load=offsets.group_metadata,
    )
    groups = GroupsCore(
        registry,
        coordinator,
        offsets,
        authorization,
        coordination=coordination,
        group_configs=group_configs,
    )
    groups.lists_unclaimed = is_controller
    consumer_groups = ConsumerGroups(
        registry,
        ConsumerGroupsConfig(
            group_consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            group_consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            group_max_size=config.group_max_size,
            classic_group_max_size=config.group_max_size,
            group_consumer_migration_policy=config.group_consumer_migration_policy,
        ),
        load=offsets.consumer_group_records,
        persist=offsets.store_consumer_group,
        classic=ClassicHandover(coordinator),
        group_config=group_configs.of,
    )
    groups.consumer_groups = consumer_groups
    coordinator.held_elsewhere = consumer_groups.holds
    membership = GroupMembership(groups)
    share_parts = share_groups(
        registry,
        authorization,
        data_plane,
        topic_admin.create_internal_topic,
        config.share_settings,
        consumer_group_exists=lambda group_id: coordinator.snapshot(group_id) is not None,
        coordination=share_coordination,
        internal_address_of=(
            gateway_session.live_internal_address if gateway_session is not None else _none
        ),
        peers=gateway_session.internal_peers if gateway_session is not None else list,
        credentials=None if config.tls is None else channel_credentials(config.tls),
        group_config=group_configs.of,
        create_dead_letter_topic=lambda name: topic_admin.start_default_topic(
            name, {DLQ_GROUP_ENABLE: "true"}
        ).result(),
        # Share groups' membership is the group coordinator's, its records in
        # __consumer_offsets beside the consumer groups' (share/share_group_log.py).
        group_log=ShareGroupLog(
            registry, offsets.share_group_records, offsets.store_consumer_group
        ),
        not_coordinated_here=groups.not_coordinated_here,
    )
    share = share_parts.core
    if isinstance(coordination, EtcdCoordination):  # read back whenever it comes back here
        for moved in (coordination.gained, coordination.lost):
            moved.append(
                lambda p: share.membership.forget_groups(lambda g: offsets.partition_for(g) == p)
            )
    transactions = TransactionsCore(
        registry,
        connections,
        authorization,
        create_topic=topic_admin.create_internal_topic,
        allocate_producer_id=producer_ids.allocate,
        offsets_partition_for=offsets.partition_for,
        coordination=txn_coordination,
        groups=groups,
        settings=settings_from(config),
        # This gateway's certificate, to ask another gateway (remote_verification.py).
        gateway_credentials=None if config.tls is None else channel_credentials(config.tls),
    )
    group_calls = GroupCalls(groups)
    transactions.adopts_orphans = is_controller
    group_service = GroupCoordinatorService(groups, membership, group_calls, authorization)
    return Coordinators(
        offsets=offsets,
        coordinator=coordinator,
        groups=groups,
        consumer_groups=consumer_groups,
        membership=membership,
        share=share,
        share_state=share_parts.state_service,
        transactions=transactions,
        group_calls=group_calls,
        group_service=group_service,
        txn_service=TransactionCoordinatorService(transactions, groups, authorization),
        produce_verification=GrpcProduceVerification(transactions, authorization),
    )


def group_config_defaults(config: GatewayConfig) -> dict[str, str]:
    """The broker's defaults of the group configs (Kafka's synonyms), from the settings."""
    share = config.share_settings
    values = {
        gc.CONSUMER_SESSION_TIMEOUT_MS: config.group_consumer_session_timeout_ms,
        gc.CONSUMER_HEARTBEAT_INTERVAL_MS: config.group_consumer_heartbeat_interval_ms,
        gc.SHARE_SESSION_TIMEOUT_MS: share.group_share_session_timeout_ms,
        gc.SHARE_HEARTBEAT_INTERVAL_MS: share.group_share_heartbeat_interval_ms,
        gc.SHARE_RECORD_LOCK_DURATION_MS: share.group_share_record_lock_duration_ms,
        gc.SHARE_DELIVERY_COUNT_LIMIT: share.group_share_delivery_count_limit,
        gc.SHARE_PARTITION_MAX_RECORD_LOCKS: share.group_share_partition_max_record_locks,
        gc.SHARE_AUTO_OFFSET_RESET: share.share_auto_offset_reset,
        gc.SHARE_ISOLATION_LEVEL: gc.READ_UNCOMMITTED,
        gc.DLQ_TOPIC_NAME: share.errors_deadletterqueue_topic_name,
        gc.DLQ_COPY_RECORD_ENABLE: str(share.errors_deadletterqueue_copy_record_enable).lower(),
    }
    return {name: str(value) for name, value in values.items()}


def _none(address: str) -> str | None:
    return None


class OffsetsExpiry:
    """Kafka's committed-offset expiry: every offsets.retention.check.interval.ms, the offsets
    past offsets.retention.minutes of groups without members are deleted (offsets_store.py)."""

    def __init__(self, config: GatewayConfig, coordinators: Coordinators) -> None:
        self._config = config
        self._coordinators = coordinators
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="offsets-expiry", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def expire(self) -> int:
        """One pass of committed-offset expiry (offsets.retention.minutes)."""
        c = self._coordinators
        return c.offsets.expire_offsets(
            time.time_ns() // 1_000_000,
            self._config.offsets_retention_minutes * 60_000,
            c.coordinator.groups_with_members()
            | {g.group_id for g in c.consumer_groups.snapshots() if g.members},
        )

    def _loop(self) -> None:
        while not self._stop.wait(self._config.offsets_retention_check_interval_ms / 1000):
            try:
                self.expire()
            except Exception:
                logger.exception("expiring committed offsets failed")
