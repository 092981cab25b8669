"""The leader registry and its controller role: topics, each partition's registration
(replicas, leader, leader epoch, ISR, partition epoch: Kafka's PartitionRegistration), and
the storage nodes that have registered.

The state is a metadata image built from a log of small records (registry_state.py,
metadata_image.py, metadata_records.py), kept in a file or in etcd (registry_store.py). Each
decision below is made on copies of the few registrations it may touch (found through the
image's indexes, never by walking every partition), written as one batch of records, and
applied only once stored.

The controller's decisions, made here under the registry's lock by the rules in
partition_changes.py (Kafka's PartitionChangeBuilder):
- Placement: each partition's replicas on distinct live nodes, the leader (first replica,
  the preferred one) on the node leading fewest partitions, the followers on the nodes
  holding fewest replicas.
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
Every registration change is handed to `listeners` (the gateway pushes it to the nodes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

from seglog.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from seglog.security.acls import AclBinding
from services.settings import BROKER_SESSION_TIMEOUT_MS

from ..coordination.election import Fence
from ..coordination.node_sessions import EtcdNodeSessions
from .metadata_image import Topic
from .metadata_records import (
    acl_record,
    client_quota_record,
    node_record,
    partition_record,
    producer_ids_record,
    remove_topic_record,
    topic_record,
)
from .node_state import Node
from .partition_changes import (
    PartitionAssignment,
    PartitionChange,
    alter_isr,
    elect_leaderless,
    fence,
    forget_unclean,
    place,
    restore_preferred,
)
from .reassignments import ReassigningState
from .registry_state import MIN_ISR_CONFIG, REGISTRY_FILE, Route, retrying
from .registry_store import MetadataStore
from .topic_rules import (
    DEFAULT_MAX_PARTITIONS,
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
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


class Registry(ReassigningState):
    def __init__(
        self,
        data_dir: Path,
        *,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
        max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
        default_replication_factor: int = DEFAULT_REPLICATION_FACTOR,
        store: MetadataStore | None = None,
        sessions: EtcdNodeSessions | None = None,
    ) -> None:
        self.limits = TopicLimits(
            max_partitions_per_topic, max_partitions, default_replication_factor
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
    def allocate_producer_ids(self, count: int = PRODUCER_ID_BLOCK_SIZE) -> range:
        """A block of producer ids no one has had (Kafka's ProducerIdsBlock), persisted
        before it is handed out."""
        with self._lock:
            start = self.next_producer_id_block
            self._commit([producer_ids_record(start + count)])
            return range(start, start + count)

    # -- nodes ---------------------------------------------------------------------------

    def register_node(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None = None,
        log_config_defaults: dict[str, str] | None = None,
        bulk_address: str = "",
        *,
        new_process: bool = True,
        unclean_shutdown: bool = False,
    ) -> None:
        """A node starting a session. A new process: its previous incarnation is fenced,
        and after an unclean shutdown it is trusted with no committed record (it may have
        lost unflushed ones). Then it is live again: elected where it was the last in-sync
        replica, a follower elsewhere until it catches up and its leader adds it back. A
        process that already registered (`new_process` False: a restarted gateway met its
        heartbeat) lost nothing and is only admitted."""
        if self.sessions is not None:
            self.sessions.open(
                node_id,
                address,
                bulk_address=bulk_address,
                offline=offline,
                log_config_defaults=log_config_defaults,
            )
        self._register(
            node_id,
            address,
            offline,
            log_config_defaults,
            bulk_address,
            new_process,
            unclean_shutdown,
        )

    @retrying
    def _register(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None,
        log_config_defaults: dict[str, str] | None,
        bulk_address: str,
        new_process: bool,
        unclean_shutdown: bool,
    ) -> None:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                node = self.nodes[node_id] = Node(node_id, address)
            working = self._working(self.image.hosted.get(node_id, set()) | self.image.leaderless)
            changed: set[PartitionChange] = set()
            if new_process:
                changed = fence(working.items(), node_id, self._eligible, self._min_isr())
                if unclean_shutdown:
                    changed |= forget_unclean(working.items(), node_id, self._eligible)
            node.address = address
            node.bulk_address = bulk_address
            node.offline = dict(offline or {})
            node.log_config_defaults = dict(log_config_defaults or {})
            node.last_heartbeat = time.monotonic()
            node.heard_from = True
            node.fenced = node.shutting_down = False
            node.metadata_offset = 0  # answered with its whole assignment
            changed |= elect_leaderless(working.items(), self._eligible)
            self._commit(
                [
                    node_record(node_id, address, _min_isr_default(node.log_config_defaults)),
                    *self._partition_records(working, changed),
                ]
            )
        self._notify(changed)

    def heartbeat(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None = None,
        bulk_address: str = "",
        metadata_offset: int = 0,
    ) -> bool:
        """Record a heartbeat; False when the node must register first (unknown to this
        registry, its address changed, or its session expired and it was fenced)."""
        if self.sessions is not None and not self.sessions.keep_alive(
            node_id, address, offline=dict(offline or {}), bulk_address=bulk_address
        ):
            return False
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None or node.address != address:
                return False
            if node.fenced and self.sessions is None:
                return False
            node.offline = dict(offline or {})
            node.bulk_address = bulk_address
            node.last_heartbeat = time.monotonic()
            node.heard_from = True
            node.metadata_offset = metadata_offset
            return True

    @retrying
    def check_sessions(self, controller: Fence | None = None) -> list[PartitionChange]:
        """The controller's tick: fence every node whose session expired (Kafka's
        BrokerHeartbeatManager), elect leaders where one became possible, all in one batch.
        It looks only at the partitions of the nodes found down and at the leaderless ones
        (the image's indexes), the latter only when a node's eligibility or the image changed
        since it last looked: an idle tick examines no partition. A node is marked fenced
        only once its fencing is stored, so a retry on newer state fences it again (a newly
        elected controller, whose marks are all clear, fences each down node once; fencing
        twice changes nothing)."""
        with self._lock:
            changed: set[PartitionChange] = set()
            down = [n for n in self.nodes.values() if not n.fenced and not self.is_live(n.node_id)]
            election = (frozenset(n for n in self.nodes if self._eligible(n)), self.image.offset)
            wanted = set()
            if self.image.leaderless and election != self.last_election:
                wanted |= self.image.leaderless
            for node in down:
                wanted |= self.image.hosted.get(node.node_id, set())
            working = self._working(wanted)
            min_isr = self._min_isr()
            for node in down:
                changed |= fence(working.items(), node.node_id, self._eligible, min_isr)
            changed |= elect_leaderless(working.items(), self._eligible)
            if changed:
                self._commit(self._partition_records(working, changed), controller)
            for node in down:
                node.fenced = True
            self.last_election = election if not down and not changed else None
        return self._notify(changed)

    def controlled_shutdown(self, node_id: int) -> bool:
        """A node asks to stop (Kafka's WantShutDown): its leaderships move to other in-sync
        replicas and it leaves the ISRs it shares. True once it leads nothing."""
        if self.sessions is not None:
            self.sessions.shut_down(node_id)
        return self._shut_down(node_id)

    @retrying
    def _shut_down(self, node_id: int) -> bool:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                return True
            node.shutting_down = True
            working = self._working(self.image.hosted.get(node_id, set()))
            changed = fence(working.items(), node_id, self._eligible, self._min_isr())
            if changed:
                self._commit(self._partition_records(working, changed))
            leads = bool(self.image.led.get(node_id))
        self._notify(changed)
        return not leads

    @retrying
    def rebalance_leaders(self, controller: Fence | None = None) -> list[PartitionChange]:
        """Kafka's preferred-leader election: each partition whose first replica is in the
        ISR and eligible but does not lead gets it back as leader."""
        with self._lock:
            working = self._working(self.image.misled)
            changed = restore_preferred(working.items(), self._eligible)
            if changed:
                self._commit(self._partition_records(working, changed), controller)
        return self._notify(changed)

    @retrying
    def alter_partition(
        self,
        node_id: int,
        topic_name: str,
        partition: int,
        leader_epoch: int,
        partition_epoch: int,
        new_isr: list[int],
    ) -> PartitionAssignment:
        """Kafka's AlterPartition, as the controller validates it; returns the partition's
        new registration. Errors change nothing."""
        with self._lock:
            p = self._partition(topic_name, partition).copy()
            alter_isr(
                p,
                f"{topic_name}-{partition}",
                node_id,
                leader_epoch,
                partition_epoch,
                new_isr,
                self._eligible,
                self._min_isr()(topic_name),
            )
            self._commit([partition_record(topic_name, partition, p.to_json())])
            return p.copy()

    def _partition(self, topic_name: str, partition: int) -> PartitionAssignment:
        topic = self.topic(topic_name)
        if not 0 <= partition < len(topic.partitions):
            raise UnknownTopicOrPartitionError(
                f"{topic_name} has partitions 0..{len(topic.partitions) - 1}, not {partition}"
            )
        return topic.partitions[partition]

    # -- topics --------------------------------------------------------------------------

    def _place(self, count: int, replication_factor: int) -> list[PartitionAssignment]:
        nodes = self._eligible_nodes()
        return place(count, replication_factor, nodes, self.leader_counts(), self.replica_counts())

    def _eligible_nodes(self) -> list[int]:
        return [n for n in self.live_nodes() if self._eligible(n)]

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
            check_enough_nodes(replication_factor, self._eligible_nodes())
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
                    topic_record(name, replication_factor, configs, num_partitions),
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
            check_enough_nodes(topic.replication_factor, self._eligible_nodes(), name)
            if validate_only:
                return topic
            added = self._place(count - current, topic.replication_factor)
            self._commit(
                [
                    topic_record(name, topic.replication_factor, topic.configs, count),
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
                name, topic.configs, set_configs, delete, append=append, subtract=subtract
            )
            if validate_only:
                return topic
            records = [topic_record(name, topic.replication_factor, configs, len(topic.partitions))]
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


def _min_isr_default(log_config_defaults: Mapping[str, str]) -> int | None:
    """The node's min.insync.replicas default, kept in its node record (None: Kafka's 1)."""
    value = log_config_defaults.get(MIN_ISR_CONFIG)
    try:
        return max(int(value), 1) if value is not None else None
    except ValueError:
        return None
