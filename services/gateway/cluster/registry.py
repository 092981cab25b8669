"""The leader registry and its controller role: topics, each partition's registration
(replicas, leader, leader epoch, ISR, partition epoch: Kafka's PartitionRegistration), and
the storage nodes that have registered.

The state is a metadata image built from a log of small records (registry_state.py,
metadata_image.py, metadata_records.py), kept in a file or in etcd (registry_store.py). Each
decision below is made on copies of the few registrations it may touch (found through the
image's indexes, never by walking every partition), written as one batch of records, and
applied only once stored.

The controller's decisions, made under the registry's lock by the rules in
partition_changes.py (Kafka's PartitionChangeBuilder); those about nodes (sessions, fencing,
controlled shutdown, preferred leaders, AlterPartition) in node_registrations.py, topics,
ACLs, quotas and producer ids here:
- Placement: each partition's replicas on distinct live nodes that are not decommissioned
  (node_registrations.py), the leader (first replica, the preferred one) on the node leading
  fewest partitions, the followers on the nodes holding fewest replicas.
- A topic whose replication factor is below its min.insync.replicas is created (as Kafka
  creates it) with a warning (`min_isr_shortfall`): seglog's nodes refuse every acks=all
  write to it.
- A node is fenced when its session expires and when a new process of it registers: it
  leaves every ISR where another member remains (for the eligible leader replicas, ELR,
  when the ISR drops below min ISR), and each partition it led elects the first replica, in
  assignment order, that is in the ISR, else in the ELR, live and not shutting down. No
  such replica: leader -1, the partition is offline, and its last ISR member is kept so it
  is elected when it returns (unclean election is off). All nodes found down in one tick
  fail over in one batch. A live process that a restarted gateway does not know yet (its
  heartbeat meets no session) is admitted without fencing: it lost nothing.
- A new process back from an unclean shutdown (it says so when it registers) may have lost
  unflushed records: it leaves the ELR, and the ISR even as its last member when the ELR
  holds the committed records (Kafka's KIP-966; partition_changes.py).
- A leader change bumps the leader epoch; every change bumps the partition epoch.
- Leaders change their ISR through AlterPartition (`alter_partition`), fenced by both epochs.
- Controlled shutdown: a node asking to stop loses its leaderships and ISR memberships the
  same way; it may stop once it leads nothing.
- Preferred leaders: `rebalance_leaders` moves leadership back to the first replica when it
  is in the ISR and live (Kafka's auto.leader.rebalance.enable).
- Reassignments and elections on demand: reassignments.py.
- A change of a topic's min.insync.replicas clears its ELR (a lower one lets the high
  watermark pass the ELR's members), as Kafka does.
Every registration change is handed to `listeners` (the gateway pushes it to the nodes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from seglog.errors import TopicAlreadyExistsError
from seglog.security.acls import AclBinding
from services.settings import BROKER_SESSION_TIMEOUT_MS

from ..coordination.node_sessions import EtcdNodeSessions
from .metadata_image import Topic, new_topic_id
from .metadata_records import (
    acl_record,
    broker_config_record,
    client_quota_record,
    group_config_record,
    partition_record,
    producer_ids_record,
    remove_topic_record,
    scram_credential_record,
    topic_record,
)
from .node_registrations import NodeRegistrations
from .node_state import Node
from .partition_changes import (
    PartitionAssignment,
    PartitionChange,
    place,
)
from .reassignments import ReassigningState
from .registry_routes import Route
from .registry_state import MIN_ISR_CONFIG, REGISTRY_FILE, min_isr_setting, retrying
from .registry_store import MetadataStore
from .scram_credentials import ScramCredential
from .topic_rules import (
    DEFAULT_MAX_PARTITIONS,
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    DEFAULT_NUM_PARTITIONS,
    DEFAULT_REPLICATION_FACTOR,
    TopicLimits,
    altered_configs,
    check_cluster_room,
    check_enough_nodes,
    check_growth,
    check_new_topic,
    refuse_internal,
)

__all__ = ["REGISTRY_FILE", "Node", "Registry", "Route", "Topic"]

logger = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class Registry(NodeRegistrations, ReassigningState):
    def __init__(
        self,
        data_dir: Path,
        *,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
        max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
        default_replication_factor: int = DEFAULT_REPLICATION_FACTOR,
        num_partitions: int = DEFAULT_NUM_PARTITIONS,
        remote_log_storage_system_enable: bool = False,
        store: MetadataStore | None = None,
        sessions: EtcdNodeSessions | None = None,
    ) -> None:
        self.limits = TopicLimits(
            max_partitions_per_topic,
            max_partitions,
            default_replication_factor,
            num_partitions,
            remote_log_storage_system_enable,
        )
        super().__init__(
            data_dir,
            session_timeout_s=session_timeout_ms / 1000,
            store=store,
            sessions=sessions,
        )

    # -- ACLs and producer ids -----------------------------------------------------------

    @retrying
    def add_acls(self, acls: list[AclBinding]) -> None:
        """Kafka's CreateAcls: all checked first; persisted before they apply."""
        for acl in acls:
            acl.check()
        with self._lock:
            records = [acl_record("add", a.to_json()) for a in set(acls) if a not in self.acls]
            if records:
                self._commit(records)
        self._notify_acls()

    @retrying
    def delete_acls(self, acls: list[AclBinding]) -> int:
        with self._lock:
            doomed = set(acls) & set(self.acls)
            if doomed:
                self._commit([acl_record("remove", a.to_json()) for a in doomed])
        self._notify_acls()
        return len(doomed)

    @retrying
    def alter_client_quotas(
        self, changes: dict[tuple[tuple[str, str], ...], dict[str, float | None]]
    ) -> None:
        """Kafka's AlterClientQuotas, checked by the caller: per entity, keys set (a rate) or
        removed (None); persisted before they apply."""
        with self._lock:
            records = []
            for entity, change in changes.items():
                values = dict(self.client_quotas.get(entity, {}))
                for key, value in change.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
                if values != self.client_quotas.get(entity, {}):
                    records.append(client_quota_record(dict(entity), values))
            if records:
                self._commit(records)

    @retrying
    def alter_scram_credentials(
        self, changes: list[tuple[str, str, ScramCredential | None]]
    ) -> None:
        """Kafka's AlterUserScramCredentials, checked by the caller: (user, mechanism, its
        new credential or None to remove it), persisted as one batch before they apply."""
        with self._lock:
            records = [
                scram_credential_record(user, mechanism, None if c is None else c.to_json())
                for user, mechanism, c in changes
            ]
            if records:
                self._commit(records)

    @retrying
    def alter_broker_configs(self, broker: str, configs: dict[str, str]) -> None:
        """A broker's whole set of dynamic configs (broker "" the cluster's default), checked
        by the caller (broker_configs.py); persisted before it applies."""
        with self._lock:
            if configs != self.image.broker_configs.get(broker, {}):
                self._commit([broker_config_record(broker, configs)])

    @retrying
    def alter_group_configs(self, group: str, configs: dict[str, str]) -> None:
        """A group's whole set of dynamic configs, checked by the caller (group_configs.py);
        persisted before it applies."""
        with self._lock:
            if configs != self.image.group_configs.get(group, {}):
                self._commit([group_config_record(group, configs)])

    @property
    def group_configs(self) -> dict[str, dict[str, str]]:
        """group id -> its dynamic configs: replaced whole on a change."""
        return self.image.group_configs

    @property
    def broker_configs(self) -> dict[str, dict[str, str]]:
        """broker id ("" the default) -> its dynamic configs: replaced whole on a change."""
        return self.image.broker_configs

    @property
    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """user -> mechanism -> credential: an image's dict, replaced whole on each change."""
        return self.image.scram_credentials

    @retrying
    def allocate_producer_ids(self, count: int = PRODUCER_ID_BLOCK_SIZE) -> range:
        """A block of producer ids no one has had (Kafka's ProducerIdsBlock), persisted
        before it is handed out."""
        with self._lock:
            start = self.next_producer_id_block
            self._commit([producer_ids_record(start + count)])
            return range(start, start + count)

    # -- topics --------------------------------------------------------------------------

    def _place(self, count: int, replication_factor: int) -> list[PartitionAssignment]:
        nodes = self._eligible_nodes()
        return place(count, replication_factor, nodes, self.leader_counts(), self.replica_counts())

    def _eligible_nodes(self) -> list[int]:
        """Where new replicas may go: eligible nodes not decommissioned."""
        return [
            n for n in self.live_nodes() if self._eligible(n) and n not in self.image.decommissioned
        ]

    def placeable_nodes(self) -> list[int]:
        with self._lock:
            return self._eligible_nodes()

    def _check_enough_nodes(self, replication_factor: int, topic: str | None = None) -> None:
        check_enough_nodes(
            replication_factor, self._eligible_nodes(), topic, self.image.decommissioned
        )

    def min_isr_shortfall(self, replication_factor: int, configs: Mapping[str, str]) -> str:
        """A warning when a topic of this replication factor and these configs can never
        take an acks=all write (its nodes refuse one while fewer than min.insync.replicas
        replicas are in sync); "" when it can."""
        configured = min_isr_setting(configs.get(MIN_ISR_CONFIG))
        with self._lock:
            min_isr = configured or self.image.min_isr_default
        if replication_factor >= min_isr:
            return ""
        source = "the topic's" if configured else "the nodes' default"
        return (
            f"replication factor {replication_factor} is below min.insync.replicas "
            f"{min_isr} ({source}): every acks=all write to it will be refused with "
            f"NOT_ENOUGH_REPLICAS; use a replication factor of at least {min_isr}, or set "
            f"min.insync.replicas={replication_factor} on the topic"
        )

    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
    ) -> tuple[int, int]:
        """Every check CreateTopics makes (topic_rules.py); returns (partitions, replication
        factor) with the defaults applied for -1."""
        num_partitions, replication_factor = check_new_topic(
            name, num_partitions, replication_factor, configs, self.limits, internal=internal
        )
        with self._lock:
            if name in self.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            check_cluster_room(num_partitions, self.image.partition_count(), self.limits)
            self._check_enough_nodes(replication_factor)
        return num_partitions, replication_factor

    @retrying
    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
    ) -> Topic:
        """Place the partitions (`_place`) and persist: one topic record and one record per
        partition."""
        with self._lock:
            num_partitions, replication_factor = self.validate_new_topic(
                name, num_partitions, replication_factor, configs, internal=internal
            )
            partitions = self._place(num_partitions, replication_factor)
            self._commit(
                [
                    topic_record(
                        name, replication_factor, configs, num_partitions, new_topic_id(self.image)
                    ),
                    *(partition_record(name, i, p.to_json()) for i, p in enumerate(partitions)),
                ]
            )
            return self.topic(name)

    @retrying
    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> Topic:
        """Grow a topic to `count` partitions, the new ones placed as create_topic places
        them; INVALID_PARTITIONS for a count that does not grow it or passes a limit."""
        refuse_internal(name, "clients cannot change it")
        with self._lock:
            topic = self.topic(name)
            current = len(topic.partitions)
            check_growth(name, current, count, self.limits)
            check_cluster_room(count - current, self.image.partition_count(), self.limits)
            self._check_enough_nodes(topic.replication_factor, name)
            if validate_only:
                return topic
            added = self._place(count - current, topic.replication_factor)
            self._commit(
                [
                    topic_record(
                        name, topic.replication_factor, topic.configs, count, topic.topic_id
                    ),
                    *(
                        partition_record(name, current + i, p.to_json())
                        for i, p in enumerate(added)
                    ),
                ]
            )
            return self.topic(name)

    @retrying
    def alter_topic_configs(
        self,
        name: str,
        set_configs: dict[str, str],
        delete: list[str],
        *,
        append: Mapping[str, str] | None = None,
        subtract: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> Topic:
        """Kafka's IncrementalAlterConfigs, the whole result validated before anything
        changes (topic_rules.altered_configs)."""
        refuse_internal(name, "its configs are the cluster's")
        with self._lock:
            topic = self.topic(name)
            configs = altered_configs(
                name,
                topic.configs,
                set_configs,
                delete,
                append=append,
                subtract=subtract,
                tiered=self.limits.remote_log_storage_system_enable,
            )
            if validate_only:
                return topic
            records = [
                topic_record(
                    name, topic.replication_factor, configs, len(topic.partitions), topic.topic_id
                )
            ]
            changed: set[PartitionChange] = set()
            if configs.get(MIN_ISR_CONFIG) != topic.configs.get(MIN_ISR_CONFIG):
                # An ELR member held every record committed under the former min ISR; a
                # lower one lets the high watermark pass it. Kafka clears the ELR too.
                with_elr = [(name, i) for i, p in enumerate(topic.partitions) if p.elr]
                working = self._working(with_elr)
                for p in working.values():
                    p.elr = []
                    p.partition_epoch += 1
                changed = set(working)
                records += self._partition_records(working, changed)
            self._commit(records)
        self._notify(changed)
        return self.topic(name)

    @retrying
    def delete_topic(self, name: str) -> Topic:
        refuse_internal(name, "clients cannot delete it")
        with self._lock:
            topic = self.topic(name)
            self._commit([remove_topic_record(name)])
            return topic
