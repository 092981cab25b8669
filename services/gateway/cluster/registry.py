"""The leader registry and its controller role: topics, each partition's registration
(replicas, leader, leader epoch, ISR, partition epoch: Kafka's PartitionRegistration), and
the storage nodes that have registered.

Durable state is one JSON document written whole on every change through a store
(registry_store.py): by default a file in the gateway's data dir, rewritten atomically (temp
file, fsync, rename, fsync of the dir), so a gateway killed at any moment restarts with
everything it had acknowledged; or a key in etcd, shared by several gateways:

    {"version": 1,
     "nodes": {"1": {"address": "127.0.0.1:7101"}},
     "topics": {"orders": {"replication_factor": 2, "configs": {"retention.ms": "60000"},
                           "partitions": [{"replicas": [1, 2], "leader": 1, "leader_epoch": 0,
                                           "isr": [1, 2], "partition_epoch": 0}]}}}

(`isr` and `partition_epoch` absent, as files written before replication have them, read
as every replica and 0; `next_producer_id_block`, the first producer id not yet handed out,
absent reads as 0; `acls`, Kafka-model ACL bindings, absent reads as none.)

Liveness is not in the document. With the file, a node is live while its last heartbeat to
this gateway is younger than the session timeout; after a gateway start every known node gets
one session timeout of grace, so routing works at once and a node that stays silent is
declared down after that. With etcd, a node is live while its session lease lives
(node_sessions.py), whichever gateway it heartbeats to.

With etcd every change is a compare-and-swap on the document: a gateway whose copy is stale
(another one wrote since) writes nothing, takes the stored state and decides again
(`_retrying`); other gateways' changes arrive by watch (`adopt`) and reach the same listeners
as this gateway's own.

The controller's decisions, made here under the registry's lock by the rules in
partition_changes.py (Kafka's PartitionChangeBuilder):
- Placement: each partition's replicas on distinct live nodes, the leader (first replica,
  the preferred one) on the node leading fewest partitions, the followers on the nodes
  holding fewest replicas.
- A node is fenced when its session expires and when it registers anew (a restarted process
  may have lost unflushed records): it leaves every ISR where another member remains, and
  each partition it led elects the first replica, in assignment order, that is in the ISR,
  live and not shutting down. No such replica: leader -1, the partition is offline, and its
  last ISR member is kept so it is elected when it returns (unclean election is off).
- A leader change bumps the leader epoch; every change bumps the partition epoch.
- Leaders change their ISR through AlterPartition (`alter_partition`), fenced by both epochs.
- Controlled shutdown: a node asking to stop loses its leaderships and ISR memberships the
  same way; it may stop once it leads nothing.
- Preferred leaders: `rebalance_leaders` moves leadership back to the first replica when it
  is in the ISR and live (Kafka's auto.leader.rebalance.enable).
Every change is handed to `listeners` (the gateway pushes it to the replicas' nodes).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from seglog.errors import (
    LeaderNotAvailableError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from seglog.security.acls import AclBinding
from services.settings import BROKER_SESSION_TIMEOUT_MS

from ..coordination.election import Fence
from ..coordination.node_sessions import EtcdNodeSessions, NodeSession
from .partition_changes import (
    NO_LEADER,
    PartitionAssignment,
    PartitionChange,
    alter_isr,
    elect_leaderless,
    fence,
    place,
    restore_preferred,
)
from .registry_store import (
    ControllerFencedError,
    FileRegistryStore,
    RegistryStore,
    StaleRegistryError,
)
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
    is_internal_topic,
    refuse_internal,
)

logger = logging.getLogger(__name__)

REGISTRY_FILE = "registry.json"
_VERSION = 1
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
# A change that keeps meeting newer state is given up after this many tries (each retry
# means another gateway's change landed in between: the cluster is making progress).
_STALE_RETRIES = 20
_T = TypeVar("_T")


def _retrying(method: Callable[..., _T]) -> Callable[..., _T]:
    """Run a change again on the stored state when another gateway wrote first: the failed
    attempt's in-memory edits are replaced by what the store holds. A controller's fenced
    decision is not retried: that controller has been deposed."""

    @functools.wraps(method)
    def run(self: Registry, *args: Any, **kwargs: Any) -> _T:
        for attempt in range(_STALE_RETRIES):
            try:
                return method(self, *args, **kwargs)
            except ControllerFencedError:
                self.reload()
                raise
            except StaleRegistryError:
                self.reload()
                if attempt == _STALE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    return run


@dataclass
class Topic:
    name: str
    replication_factor: int
    configs: dict[str, str]
    partitions: list[PartitionAssignment]

    @property
    def internal(self) -> bool:
        return is_internal_topic(self.name)


@dataclass
class Node:
    node_id: int
    address: str
    last_heartbeat: float | None = None  # time.monotonic() of the last heartbeat
    grace_until: float = 0.0
    heard_from: bool = False
    # Partitions the node reported it cannot serve, with its reason (from its heartbeats).
    offline: dict[tuple[str, int], str] = field(default_factory=dict)
    # Its own topic defaults (--config log.*), Kafka's names, from its heartbeats.
    log_config_defaults: dict[str, str] = field(default_factory=dict)
    bulk_address: str = ""  # its bulk fetch listener, from its heartbeats ("" when none)
    fenced: bool = False  # its session expired: out of every ISR, leads nothing
    shutting_down: bool = False  # asked for a controlled shutdown
    session_lease: int = 0  # its etcd session's lease (node_sessions.py), 0 without etcd


@dataclass(frozen=True)
class Route:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    address: str | None
    live: bool
    bulk_address: str = ""


class Registry:
    def __init__(
        self,
        data_dir: Path,
        *,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
        max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
        default_replication_factor: int = DEFAULT_REPLICATION_FACTOR,
        store: RegistryStore | None = None,
        sessions: EtcdNodeSessions | None = None,
    ) -> None:
        # Where the state is kept (registry_store.py): registry.json by default.
        self.store = store if store is not None else FileRegistryStore(data_dir / REGISTRY_FILE)
        self.limits = TopicLimits(
            max_partitions_per_topic, max_partitions, default_replication_factor
        )
        # Called (outside the lock) with the partitions whose registration changed.
        self.listeners: list[Callable[[list[PartitionChange]], object]] = []
        self.session_timeout_s = session_timeout_ms / 1000
        self._lock = threading.RLock()
        self.topics: dict[str, Topic] = {}
        self.nodes: dict[int, Node] = {}
        self.next_producer_id_block = 0  # the first id of the next block to hand out
        self.acls: list[AclBinding] = []
        # Called (outside the lock) with every ACL after a change.
        self.acl_listeners: list[Callable[[list[AclBinding]], object]] = []
        # Node sessions as etcd leases (several gateways), else heartbeats to this one.
        self.sessions = sessions
        if sessions is not None:
            sessions.listeners.append(self.session_changed)
        data_dir.mkdir(parents=True, exist_ok=True)
        self._apply_state(self.store.load())
        self.store.watch(self.adopt)

    # -- persistence ---------------------------------------------------------------------

    def _apply_state(self, state: dict[str, Any] | None) -> set[PartitionChange]:
        """Make the stored state this registry's (keeping each node's session); returns the
        partitions whose registration differs from before."""
        if state is None:
            return set()
        if state.get("version") != _VERSION:
            raise ValueError(f"unknown registry version {state.get('version')!r}")
        before = {tp: p.to_json() for tp, p in self._registrations()}
        grace = time.monotonic() + self.session_timeout_s
        self.next_producer_id_block = int(state.get("next_producer_id_block", 0))
        self.acls = [AclBinding(**acl) for acl in state.get("acls", [])]
        for node_id, node in state["nodes"].items():
            known = self.nodes.get(int(node_id))
            if known is None:
                self.nodes[int(node_id)] = Node(int(node_id), node["address"], grace_until=grace)
                self._session_to_node(int(node_id))
            elif self.sessions is None or not self.sessions.is_live(int(node_id)):
                known.address = node["address"]
        self.topics = {
            name: Topic(
                name,
                topic["replication_factor"],
                dict(topic["configs"]),
                [PartitionAssignment(**p) for p in topic["partitions"]],
            )
            for name, topic in state["topics"].items()
        }
        after = {tp: p.to_json() for tp, p in self._registrations()}
        return {tp for tp in before.keys() | after.keys() if before.get(tp) != after.get(tp)}

    def adopt(self, state: dict[str, Any], revision: int) -> None:
        """Another gateway's change, pushed by the store's watch."""
        self._take(lambda: state, revision)

    def reload(self) -> None:
        """Take the stored state now (after a write found it newer than this copy)."""
        self._take(self.store.load)

    def _take(self, read: Callable[[], dict[str, Any] | None], revision: int = 0) -> None:
        """Apply a stored state and tell the listeners what changed. With `revision` (a
        watched state) only one newer than this registry's copy is taken."""
        with self._lock:
            if revision and revision <= self.store.revision:
                return  # this registry's own write, or one it has already taken
            acls_before = list(self.acls)
            changed = self._apply_state(read())
            if revision:
                self.store.revision = revision
            acls = list(self.acls) if self.acls != acls_before else None
        self._notify(changed)
        if acls is not None:
            for listener in self.acl_listeners:
                listener(acls)

    def _save(self, fence: Fence | None = None) -> None:
        state = {
            "version": _VERSION,
            "next_producer_id_block": self.next_producer_id_block,
            "acls": [acl.to_json() for acl in self.acls],
            "nodes": {str(n.node_id): {"address": n.address} for n in self.nodes.values()},
            "topics": {
                t.name: {
                    "replication_factor": t.replication_factor,
                    "configs": t.configs,
                    "partitions": [p.to_json() for p in t.partitions],
                }
                for t in self.topics.values()
            },
        }
        self.store.save(state, fence)

    @_retrying
    def add_acls(self, acls: list[AclBinding]) -> None:
        """Kafka's CreateAcls: all checked first; persisted before they apply."""
        for acl in acls:
            acl.check()
        with self._lock:
            self.acls = sorted(
                set(self.acls) | set(acls), key=lambda a: tuple(a.to_json().values())
            )
            self._save()
            current = list(self.acls)
        for listener in self.acl_listeners:
            listener(current)

    @_retrying
    def delete_acls(self, acls: list[AclBinding]) -> int:
        with self._lock:
            doomed = set(acls) & set(self.acls)
            self.acls = [a for a in self.acls if a not in doomed]
            if doomed:
                self._save()
            current = list(self.acls)
        for listener in self.acl_listeners:
            listener(current)
        return len(doomed)

    @_retrying
    def allocate_producer_ids(self, count: int = PRODUCER_ID_BLOCK_SIZE) -> range:
        """A block of producer ids no one has had (Kafka's ProducerIdsBlock), persisted
        before it is handed out."""
        with self._lock:
            start = self.next_producer_id_block
            self.next_producer_id_block = start + count
            self._save()
            return range(start, start + count)

    # -- nodes ---------------------------------------------------------------------------

    def register_node(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None = None,
        log_config_defaults: dict[str, str] | None = None,
        bulk_address: str = "",
    ) -> None:
        """A node starting a session: its previous incarnation is fenced (it may have lost
        unflushed records), then it is live again: elected where it was the last in-sync
        replica, a follower elsewhere until it catches up and its leader adds it back."""
        if self.sessions is not None:
            self.sessions.open(
                node_id,
                address,
                bulk_address=bulk_address,
                offline=offline,
                log_config_defaults=log_config_defaults,
            )
        self._register(node_id, address, offline, log_config_defaults, bulk_address)

    @_retrying
    def _register(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None,
        log_config_defaults: dict[str, str] | None,
        bulk_address: str,
    ) -> None:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                node = self.nodes[node_id] = Node(node_id, address)
            changed = fence(self._registrations(), node_id, self._eligible)
            node.address = address
            node.bulk_address = bulk_address
            node.offline = dict(offline or {})
            node.log_config_defaults = dict(log_config_defaults or {})
            node.last_heartbeat = time.monotonic()
            node.heard_from = True
            node.fenced = node.shutting_down = False
            changed |= elect_leaderless(self._registrations(), self._eligible)
            self._save()
        self._notify(changed)

    def heartbeat(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None = None,
        bulk_address: str = "",
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
            return True

    @_retrying
    def check_sessions(self, controller: Fence | None = None) -> list[PartitionChange]:
        """The controller's tick: fence every node whose session expired (Kafka's
        BrokerHeartbeatManager), elect leaders where one became possible. A node is marked
        fenced only once its fencing is stored, so a retry on newer state fences it again
        (a newly elected controller, whose marks are all clear, fences each down node once;
        fencing twice changes nothing)."""
        with self._lock:
            changed: set[PartitionChange] = set()
            down = [n for n in self.nodes.values() if not n.fenced and not self.is_live(n.node_id)]
            for node in down:
                changed |= fence(self._registrations(), node.node_id, self._eligible)
            changed |= elect_leaderless(self._registrations(), self._eligible)
            if changed:
                self._save(controller)
            for node in down:
                node.fenced = True
        return self._notify(changed)

    def controlled_shutdown(self, node_id: int) -> bool:
        """A node asks to stop (Kafka's WantShutDown): its leaderships move to other in-sync
        replicas and it leaves the ISRs it shares. True once it leads nothing."""
        if self.sessions is not None:
            self.sessions.shut_down(node_id)
        return self._shut_down(node_id)

    @_retrying
    def _shut_down(self, node_id: int) -> bool:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                return True
            node.shutting_down = True
            changed = fence(self._registrations(), node_id, self._eligible)
            if changed:
                self._save()
            leads = any(p.leader == node_id for t in self.topics.values() for p in t.partitions)
        self._notify(changed)
        return not leads

    @_retrying
    def rebalance_leaders(self, controller: Fence | None = None) -> list[PartitionChange]:
        """Kafka's preferred-leader election: each partition whose first replica is in the
        ISR and eligible but does not lead gets it back as leader."""
        with self._lock:
            changed = restore_preferred(self._registrations(), self._eligible)
            if changed:
                self._save(controller)
        return self._notify(changed)

    def session_changed(self, node_id: int, session: NodeSession | None) -> None:
        """A node's etcd session began, changed or ended (whichever gateway it talks to)."""
        if session is None:
            return  # down from now on (is_live); the controller fences it
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                node = self.nodes[node_id] = Node(node_id, session.address)
            if node.session_lease != session.lease:
                node.fenced = False
                node.session_lease = session.lease
            node.address = session.address
            node.bulk_address = session.bulk_address
            node.offline = dict(session.offline)
            node.log_config_defaults = dict(session.log_config_defaults)
            node.shutting_down = session.shutting_down
            node.heard_from = True

    def _session_to_node(self, node_id: int) -> None:
        session = None if self.sessions is None else self.sessions.get(node_id)
        if session is not None:
            self.session_changed(node_id, session)

    @_retrying
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
            p = self._partition(topic_name, partition)
            alter_isr(
                p,
                f"{topic_name}-{partition}",
                node_id,
                leader_epoch,
                partition_epoch,
                new_isr,
                self._eligible,
            )
            self._save()
            return p.copy()

    def _partition(self, topic_name: str, partition: int) -> PartitionAssignment:
        topic = self.topic(topic_name)
        if not 0 <= partition < len(topic.partitions):
            raise UnknownTopicOrPartitionError(
                f"{topic_name} has partitions 0..{len(topic.partitions) - 1}, not {partition}"
            )
        return topic.partitions[partition]

    def _eligible(self, node_id: int) -> bool:
        """May lead or join an ISR: registered, live, not fenced, not shutting down."""
        node = self.nodes.get(node_id)
        return (
            node is not None
            and not node.fenced
            and not node.shutting_down
            and self.is_live(node_id)
        )

    def _registrations(self) -> list[tuple[PartitionChange, PartitionAssignment]]:
        return [
            ((topic.name, i), p)
            for topic in self.topics.values()
            for i, p in enumerate(topic.partitions)
        ]

    def _notify(self, changed: set[PartitionChange]) -> list[PartitionChange]:
        ordered = sorted(changed)
        if ordered:
            for listener in self.listeners:
                try:
                    listener(ordered)
                except Exception:
                    logger.exception("a registry listener failed")
        return ordered

    def is_live(self, node_id: int) -> bool:
        if self.sessions is not None:
            return self.sessions.is_live(node_id)
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                return False
            now = time.monotonic()
            if (
                node.last_heartbeat is not None
                and now - node.last_heartbeat < self.session_timeout_s
            ):
                return True
            return not node.heard_from and now < node.grace_until

    def live_nodes(self) -> list[int]:
        with self._lock:
            return sorted(n for n in self.nodes if self.is_live(n))

    def leader_counts(self) -> dict[int, int]:
        with self._lock:
            counts = dict.fromkeys(self.nodes, 0)
            for topic in self.topics.values():
                for p in topic.partitions:
                    if p.leader != NO_LEADER:
                        counts[p.leader] = counts.get(p.leader, 0) + 1
            return counts

    def replica_counts(self) -> dict[int, int]:
        with self._lock:
            counts = dict.fromkeys(self.nodes, 0)
            for topic in self.topics.values():
                for p in topic.partitions:
                    for replica in p.replicas:
                        counts[replica] = counts.get(replica, 0) + 1
            return counts

    def _place(self, count: int, replication_factor: int) -> list[PartitionAssignment]:
        nodes = [n for n in self.live_nodes() if self._eligible(n)]
        return place(count, replication_factor, nodes, self.leader_counts(), self.replica_counts())

    def partitions_of(
        self, wanted: list[PartitionChange]
    ) -> list[tuple[Topic, int, PartitionAssignment]]:
        """The named partitions that still exist, each with a copy of its registration."""
        with self._lock:
            out = []
            for name, i in wanted:
                topic = self.topics.get(name)
                if topic is not None and 0 <= i < len(topic.partitions):
                    out.append((topic, i, topic.partitions[i].copy()))
            return out

    def addresses(self) -> dict[int, str]:
        with self._lock:
            return {n: node.address for n, node in self.nodes.items()}

    def bulk_addresses(self) -> dict[int, str]:
        with self._lock:
            return {n: node.bulk_address for n, node in self.nodes.items() if node.bulk_address}

    def assignment_for(self, node_id: int) -> list[tuple[Topic, int, PartitionAssignment]]:
        with self._lock:
            return [
                (topic, i, p.copy())
                for topic in self.topics.values()
                for i, p in enumerate(topic.partitions)
                if node_id in p.replicas
            ]

    # -- topics --------------------------------------------------------------------------

    def _eligible_nodes(self) -> list[int]:
        return [n for n in self.live_nodes() if self._eligible(n)]

    def _partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

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
            check_cluster_room(num_partitions, self._partition_count(), self.limits)
            check_enough_nodes(replication_factor, self._eligible_nodes())
        return num_partitions, replication_factor

    @_retrying
    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
    ) -> Topic:
        """Place the partitions (`_place`) and persist."""
        with self._lock:
            num_partitions, replication_factor = self.validate_new_topic(
                name, num_partitions, replication_factor, configs, internal=internal
            )
            partitions = self._place(num_partitions, replication_factor)
            topic = Topic(name, replication_factor, dict(configs), partitions)
            self.topics[name] = topic
            self._save()
            return topic

    @_retrying
    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> Topic:
        """Grow a topic to `count` partitions, the new ones placed as create_topic places
        them; INVALID_PARTITIONS for a count that does not grow it or passes a limit."""
        refuse_internal(name, "clients cannot change it")
        with self._lock:
            topic = self.topic(name)
            current = len(topic.partitions)
            check_growth(name, current, count, self.limits)
            check_cluster_room(count - current, self._partition_count(), self.limits)
            check_enough_nodes(topic.replication_factor, self._eligible_nodes(), name)
            if validate_only:
                return topic
            topic.partitions.extend(self._place(count - current, topic.replication_factor))
            self._save()
            return topic

    @_retrying
    def alter_topic_configs(
        self,
        name: str,
        set_configs: dict[str, str],
        delete: list[str],
        *,
        validate_only: bool = False,
    ) -> Topic:
        """Kafka's IncrementalAlterConfigs, the whole result validated before anything
        changes."""
        refuse_internal(name, "its configs are the cluster's")
        with self._lock:
            topic = self.topic(name)
            configs = altered_configs(name, topic.configs, set_configs, delete)
            if validate_only:
                return topic
            topic.configs = configs
            self._save()
            return topic

    @_retrying
    def delete_topic(self, name: str) -> Topic:
        refuse_internal(name, "clients cannot delete it")
        with self._lock:
            topic = self.topics.pop(name, None)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            self._save()
            return topic

    def topic(self, name: str) -> Topic:
        with self._lock:
            topic = self.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            return topic

    def route(self, topic_name: str, partition: int) -> Route:
        """Run for every partition of every Produce and Fetch, so it takes no lock a
        control-plane write holds (writes keep the registry's lock while they fsync or call
        etcd): it reads the current objects as they are. Writers swap or update them under
        that lock; a route read in the middle of a leader change may pair the new leader with
        the old epoch, or the reverse, and the node it names then answers NOT_LEADER, which
        clients retry as they do for any leader change."""
        topic = self.topics.get(topic_name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {topic_name!r} does not exist")
        partitions = topic.partitions
        if not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartitionError(
                f"{topic_name} has partitions 0..{len(partitions) - 1}, not {partition}"
            )
        p = partitions[partition]
        leader = p.leader
        if leader == NO_LEADER:
            raise LeaderNotAvailableError(
                f"{topic_name}-{partition} is offline: no replica of its ISR {p.isr} is "
                f"live (unclean leader election is off)"
            )
        node = self.nodes.get(leader)
        reason = None if node is None else node.offline.get((topic_name, partition))
        if reason is not None:
            raise StorageError(f"{topic_name}-{partition} is offline on node {leader}: {reason}")
        return Route(
            topic_name,
            partition,
            leader,
            p.leader_epoch,
            node.address if node else None,
            self._routable(leader, node),
            node.bulk_address if node else "",
        )

    def _routable(self, node_id: int, node: Node | None) -> bool:
        """`is_live` as routing reads it: without the registry's lock, and never acting on
        what it reads (ending a lapsed etcd session is the control plane's to do)."""
        if self.sessions is not None:
            return self.sessions.has_session(node_id)
        if node is None:
            return False
        now = time.monotonic()
        last = node.last_heartbeat
        if last is not None and now - last < self.session_timeout_s:
            return True
        return not node.heard_from and now < node.grace_until
