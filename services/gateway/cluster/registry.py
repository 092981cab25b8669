"""The leader registry and its controller role: topics, each partition's registration
(replicas, leader, leader epoch, ISR, partition epoch: Kafka's PartitionRegistration), and
the storage nodes that have registered.

The state is a metadata image built from a log of small records (registry_state.py,
metadata_image.py, metadata_records.py), kept in a file or in etcd (registry_store.py). Each
decision below is made on copies of the few registrations it may touch (found through the
image's indexes, never by walking every partition), written as one batch of records, and
applied only once stored.

`Registry` holds one `RegistryState` (registry_state.py: the fields, the image, the log and
the one lock) and the parts that decide on it, each given only what it calls:
- `routes` (registry_routes.py): the data plane's reads, without the lock;
- `registrations` (node_registrations.py): sessions, fencing, controlled shutdown,
  decommissioning, preferred leaders, AlterPartition;
- `reassigning` (reassignments.py): reassignments and elections on demand;
- `topic_decisions` (topic_decisions.py): creating, growing, altering, deleting topics;
- here: ACLs, quotas, SCRAM credentials, broker and group configs, producer ids.
Callers use the registry alone: it hands each call to its part (the part's bound method,
so a route costs no extra call).

The controller's decisions, made under the registry's lock by the rules in
partition_changes.py (Kafka's PartitionChangeBuilder):
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
from pathlib import Path

from seglog.security.acls import AclBinding
from services.settings import BROKER_SESSION_TIMEOUT_MS

from ..coordination.node_sessions import EtcdNodeSessions
from .metadata_image import MetadataImage, Topic
from .metadata_records import (
    acl_record,
    broker_config_record,
    client_quota_record,
    group_config_record,
    producer_ids_record,
    scram_credential_record,
)
from .node_registrations import NodeRegistrations
from .node_state import Node
from .reassignments import Reassignments
from .registry_routes import RegistryRoutes, Route
from .registry_state import REGISTRY_FILE, RegistryState, retrying
from .registry_store import MetadataStore
from .scram_credentials import ScramCredential
from .topic_decisions import TopicDecisions
from .topic_rules import (
    DEFAULT_MAX_PARTITIONS,
    DEFAULT_MAX_PARTITIONS_PER_TOPIC,
    DEFAULT_NUM_PARTITIONS,
    DEFAULT_REPLICATION_FACTOR,
    TopicLimits,
)

__all__ = ["REGISTRY_FILE", "Node", "Registry", "Route", "Topic"]

logger = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class Registry:
    """The registry, composed of the parts named in this module's docstring. They share one
    `RegistryState`; the methods the rest of the gateway calls are the parts' own, bound
    here, so each keeps its signature and its `retrying` in one place."""

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
        state = self._state = RegistryState(
            data_dir,
            session_timeout_s=session_timeout_ms / 1000,
            store=store,
            sessions=sessions,
        )
        self.routes = RegistryRoutes(state)
        self.registrations = NodeRegistrations(state, self.routes)
        self.reassigning = Reassignments(state)
        self.topic_decisions = TopicDecisions(state, self.routes, self.limits)
        # Fixed for the registry's life (only the image is replaced).
        self.nodes = state.nodes
        self.store = state.store
        self.listeners = state.listeners
        self.acl_listeners = state.acl_listeners
        self.session_timeout_s = state.session_timeout_s
        # -- the state's reads (registry_state.py)
        self.is_live = state.is_live
        self.live_nodes = state.live_nodes
        self.leader_counts = state.leader_counts
        self.replica_counts = state.replica_counts
        self.decommissioned_nodes = state.decommissioned_nodes
        self.offline_partition_count = state.offline_partition_count
        self.partitions_of = state.partitions_of
        self.addresses = state.addresses
        self.bulk_addresses = state.bulk_addresses
        self.assignment_for = state.assignment_for
        self.node_view = state.node_view
        self.pushed = state.pushed
        # -- routes (registry_routes.py), read for every partition of every Produce and Fetch
        self.topic = self.routes.topic
        self.topic_name_of = self.routes.topic_name_of
        self.topic_id_of = self.routes.topic_id_of
        self.route = self.routes.route
        self.bulk_routes = self.routes.bulk_routes
        # -- nodes (node_registrations.py)
        self.register_node = self.registrations.register_node
        self.heartbeat = self.registrations.heartbeat
        self.check_sessions = self.registrations.check_sessions
        self.controlled_shutdown = self.registrations.controlled_shutdown
        self.set_decommissioned = self.registrations.set_decommissioned
        self.rebalance_leaders = self.registrations.rebalance_leaders
        self.alter_partition = self.registrations.alter_partition
        # -- reassignments and elections (reassignments.py)
        self.alter_reassignments = self.reassigning.alter_reassignments
        self.placement = self.reassigning.placement
        self.reassignments = self.reassigning.reassignments
        self.complete_reassignments = self.reassigning.complete_reassignments
        self.elect_leaders = self.reassigning.elect_leaders
        # -- topics (topic_decisions.py)
        self.placeable_nodes = self.topic_decisions.placeable_nodes
        self.min_isr_shortfall = self.topic_decisions.min_isr_shortfall
        self.validate_new_topic = self.topic_decisions.validate_new_topic
        self.create_topic = self.topic_decisions.create_topic
        self.create_partitions = self.topic_decisions.create_partitions
        self.alter_topic_configs = self.topic_decisions.alter_topic_configs
        self.delete_topic = self.topic_decisions.delete_topic

    # -- the state's fields that change (registry_state.py) -------------------------------

    @property
    def image(self) -> MetadataImage:
        return self._state.image

    @property
    def partitions_examined(self) -> int:
        """Partition registrations copied for the controller's decisions: what a tick costs."""
        return self._state.partitions_examined

    @property
    def cluster_id(self) -> str:
        return self._state.cluster_id

    @property
    def topics(self) -> dict[str, Topic]:
        return self._state.topics

    @property
    def acls(self) -> list[AclBinding]:
        return self._state.acls

    @property
    def client_quotas(self) -> dict[tuple[tuple[str, str], ...], dict[str, float]]:
        return self._state.client_quotas

    @property
    def metadata_offset(self) -> int:
        return self._state.metadata_offset

    @property
    def acls_narrowed_offset(self) -> int:
        return self._state.acls_narrowed_offset

    # -- ACLs and producer ids -----------------------------------------------------------

    @retrying
    def add_acls(self, acls: list[AclBinding]) -> None:
        """Kafka's CreateAcls: all checked first; persisted before they apply."""
        for acl in acls:
            acl.check()
        with self._state._lock:
            records = [
                acl_record("add", a.to_json()) for a in set(acls) if a not in self._state.acls
            ]
            if records:
                self._state._commit(records)
        self._state._notify_acls()

    @retrying
    def delete_acls(self, acls: list[AclBinding]) -> int:
        with self._state._lock:
            doomed = set(acls) & set(self._state.acls)
            if doomed:
                self._state._commit([acl_record("remove", a.to_json()) for a in doomed])
        self._state._notify_acls()
        return len(doomed)

    @retrying
    def alter_client_quotas(
        self, changes: dict[tuple[tuple[str, str], ...], dict[str, float | None]]
    ) -> None:
        """Kafka's AlterClientQuotas, checked by the caller: per entity, keys set (a rate) or
        removed (None); persisted before they apply."""
        with self._state._lock:
            records = []
            for entity, change in changes.items():
                values = dict(self._state.client_quotas.get(entity, {}))
                for key, value in change.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
                if values != self._state.client_quotas.get(entity, {}):
                    records.append(client_quota_record(dict(entity), values))
            if records:
                self._state._commit(records)

    @retrying
    def alter_scram_credentials(
        self, changes: list[tuple[str, str, ScramCredential | None]]
    ) -> None:
        """Kafka's AlterUserScramCredentials, checked by the caller: (user, mechanism, its
        new credential or None to remove it), persisted as one batch before they apply."""
        with self._state._lock:
            records = [
                scram_credential_record(user, mechanism, None if c is None else c.to_json())
                for user, mechanism, c in changes
            ]
            if records:
                self._state._commit(records)

    @retrying
    def alter_broker_configs(self, broker: str, configs: dict[str, str]) -> None:
        """A broker's whole set of dynamic configs (broker "" the cluster's default), checked
        by the caller (broker_configs.py); persisted before it applies."""
        with self._state._lock:
            if configs != self._state.image.broker_configs.get(broker, {}):
                self._state._commit([broker_config_record(broker, configs)])

    @retrying
    def alter_group_configs(self, group: str, configs: dict[str, str]) -> None:
        """A group's whole set of dynamic configs, checked by the caller (group_configs.py);
        persisted before it applies."""
        with self._state._lock:
            if configs != self._state.image.group_configs.get(group, {}):
                self._state._commit([group_config_record(group, configs)])

    @property
    def group_configs(self) -> dict[str, dict[str, str]]:
        """group id -> its dynamic configs: replaced whole on a change."""
        return self._state.image.group_configs

    @property
    def broker_configs(self) -> dict[str, dict[str, str]]:
        """broker id ("" the default) -> its dynamic configs: replaced whole on a change."""
        return self._state.image.broker_configs

    @property
    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        """user -> mechanism -> credential: an image's dict, replaced whole on each change."""
        return self._state.image.scram_credentials

    @retrying
    def allocate_producer_ids(self, count: int = PRODUCER_ID_BLOCK_SIZE) -> range:
        """A block of producer ids no one has had (Kafka's ProducerIdsBlock), persisted
        before it is handed out."""
        with self._state._lock:
            start = self._state.next_producer_id_block
            self._state._commit([producer_ids_record(start + count)])
            return range(start, start + count)

    # -- topics --------------------------------------------------------------------------
