"""The leader registry: topics, their partitions' replicas, leader and leader epoch, and the
storage nodes that have registered.

Durable state lives in one JSON file in the gateway's data dir, rewritten atomically (temp
file, fsync, rename, fsync of the dir) on every change, so a gateway killed at any moment
restarts with everything it had acknowledged:

    {"version": 1,
     "nodes": {"1": {"address": "127.0.0.1:7101"}},
     "topics": {"orders": {"replication_factor": 1, "configs": {"retention.ms": "60000"},
                           "partitions": [{"replicas": [1], "leader": 1, "leader_epoch": 0}]}}}

Liveness is not persisted: a node is live while its last heartbeat is younger than the
session timeout. After a gateway start every known node gets one session timeout of grace, so
routing works at once and a node that stays silent is declared down after that.

Leader epochs: a partition's epoch starts at 0 and increases each time its leader's node
registers anew (a new session, as when Kafka re-elects a leader after a broker restart);
clients holding an older epoch get NOT_LEADER_OR_FOLLOWER and refresh metadata.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from seglog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from seglog.storage import LogConfig, log_files
from seglog.storage.config import check_config_names
from seglog.storage.log_files import atomic_write

REGISTRY_FILE = "registry.json"
_VERSION = 1
DEFAULT_NUM_PARTITIONS = 1
# Kafka's controller refuses one operation creating more than 10,000 partitions
# (QuorumController.MAX_RECORDS_PER_USER_OP). The cluster-wide bound keeps the whole cluster
# within what its nodes can hold open (each partition holds at least three files open).
DEFAULT_MAX_PARTITIONS_PER_TOPIC = 10_000
DEFAULT_MAX_PARTITIONS = 20_000
DEFAULT_REPLICATION_FACTOR = 1


@dataclass
class PartitionAssignment:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0


@dataclass
class Topic:
    name: str
    replication_factor: int
    configs: dict[str, str]
    partitions: list[PartitionAssignment]

    @property
    def internal(self) -> bool:
        return is_internal_topic(self.name)


def is_internal_topic(name: str) -> bool:
    """`__consumer_offsets` and any other `__` topic: written only by the cluster itself."""
    return name.startswith("__")


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


@dataclass(frozen=True)
class Route:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    address: str | None
    live: bool


class Registry:
    def __init__(
        self,
        data_dir: Path,
        *,
        session_timeout_ms: int = 9000,
        max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
    ) -> None:
        self.path = data_dir / REGISTRY_FILE
        self.max_partitions_per_topic = max_partitions_per_topic
        self.max_partitions = max_partitions
        self.session_timeout_s = session_timeout_ms / 1000
        self._lock = threading.RLock()
        self.topics: dict[str, Topic] = {}
        self.nodes: dict[int, Node] = {}
        data_dir.mkdir(parents=True, exist_ok=True)
        self._load()

    # -- persistence ---------------------------------------------------------------------

    def _load(self) -> None:
        if not self.path.exists():
            return
        state = json.loads(self.path.read_text())
        if state.get("version") != _VERSION:
            raise ValueError(f"{self.path}: unknown registry version {state.get('version')!r}")
        grace = time.monotonic() + self.session_timeout_s
        for node_id, node in state["nodes"].items():
            self.nodes[int(node_id)] = Node(int(node_id), node["address"], grace_until=grace)
        for name, topic in state["topics"].items():
            self.topics[name] = Topic(
                name,
                topic["replication_factor"],
                dict(topic["configs"]),
                [PartitionAssignment(**p) for p in topic["partitions"]],
            )

    def _save(self) -> None:
        state = {
            "version": _VERSION,
            "nodes": {str(n.node_id): {"address": n.address} for n in self.nodes.values()},
            "topics": {
                t.name: {
                    "replication_factor": t.replication_factor,
                    "configs": t.configs,
                    "partitions": [
                        {"replicas": p.replicas, "leader": p.leader, "leader_epoch": p.leader_epoch}
                        for p in t.partitions
                    ],
                }
                for t in self.topics.values()
            },
        }
        atomic_write(self.path, json.dumps(state, indent=1, sort_keys=True).encode())

    # -- nodes ---------------------------------------------------------------------------

    def register_node(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None = None,
        log_config_defaults: dict[str, str] | None = None,
    ) -> None:
        """A node starting a session: record its address, bump its partitions' epochs."""
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                node = self.nodes[node_id] = Node(node_id, address)
            node.address = address
            node.offline = dict(offline or {})
            node.log_config_defaults = dict(log_config_defaults or {})
            node.last_heartbeat = time.monotonic()
            node.heard_from = True
            for topic in self.topics.values():
                for p in topic.partitions:
                    if p.leader == node_id:
                        p.leader_epoch += 1
            self._save()

    def heartbeat(
        self, node_id: int, address: str, offline: dict[tuple[str, int], str] | None = None
    ) -> bool:
        """Record a heartbeat; False when the node must register first (unknown to this
        registry, or its address changed)."""
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None or node.address != address:
                return False
            node.offline = dict(offline or {})
            node.last_heartbeat = time.monotonic()
            node.heard_from = True
            return True

    def is_live(self, node_id: int) -> bool:
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
                    counts[p.leader] = counts.get(p.leader, 0) + 1
            return counts

    def assignment_for(self, node_id: int) -> list[tuple[Topic, int, PartitionAssignment]]:
        with self._lock:
            return [
                (topic, i, p)
                for topic in self.topics.values()
                for i, p in enumerate(topic.partitions)
                if node_id in p.replicas
            ]

    # -- topics --------------------------------------------------------------------------

    def validate_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
    ) -> tuple[int, int]:
        """Every check CreateTopics makes; returns (partitions, replication factor) with the
        defaults applied for -1. Only the gateway itself (`internal`) creates `__` topics."""
        log_files.check_topic_name(name)
        if is_internal_topic(name) and not internal:
            raise InvalidTopicError(
                f"topic {name!r}: names starting with '__' are reserved for internal topics"
            )
        if num_partitions == -1:
            num_partitions = DEFAULT_NUM_PARTITIONS
        if not 1 <= num_partitions <= self.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"num_partitions must be in [1, {self.max_partitions_per_topic}] "
                f"(the gateway's --max-partitions-per-topic), got {num_partitions}"
            )
        log_files.check_directory_name_fits(name, num_partitions)
        if replication_factor == -1:
            replication_factor = DEFAULT_REPLICATION_FACTOR
        if replication_factor != 1:
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor}: only 1 is supported until "
                f"replication exists"
            )
        try:
            LogConfig().with_overrides(configs)
        except (InvalidConfigError, TypeError, ValueError) as exc:
            raise InvalidConfigError(f"topic {name}: {exc}") from None
        with self._lock:
            if name in self.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            existing = sum(len(t.partitions) for t in self.topics.values())
            if existing + num_partitions > self.max_partitions:
                raise InvalidPartitionsError(
                    f"{num_partitions} more partitions would make {existing + num_partitions} "
                    f"in the cluster, over its limit of {self.max_partitions} "
                    f"(the gateway's --max-partitions)"
                )
            if len(self.live_nodes()) < replication_factor:
                raise InvalidReplicationFactorError(
                    f"replication factor {replication_factor} is larger than the "
                    f"{len(self.live_nodes())} live storage nodes"
                )
        return num_partitions, replication_factor

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        internal: bool = False,
    ) -> Topic:
        """Place the partitions on live nodes, each on the node leading the fewest partitions
        so far (ties to the lower id), and persist."""
        with self._lock:
            num_partitions, replication_factor = self.validate_new_topic(
                name, num_partitions, replication_factor, configs, internal=internal
            )
            live = self.live_nodes()
            counts = {n: c for n, c in self.leader_counts().items() if n in live}
            partitions = []
            for _ in range(num_partitions):
                leader = min(live, key=lambda n: (counts[n], n))
                counts[leader] += 1
                partitions.append(PartitionAssignment([leader], leader, 0))
            topic = Topic(name, replication_factor, dict(configs), partitions)
            self.topics[name] = topic
            self._save()
            return topic

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> Topic:
        """Grow a topic to `count` partitions, the new ones placed as create_topic places
        them; INVALID_PARTITIONS for a count that does not grow it or passes a limit."""
        if is_internal_topic(name):
            raise InvalidTopicError(f"topic {name!r} is internal: clients cannot change it")
        with self._lock:
            topic = self.topic(name)
            current = len(topic.partitions)
            if count <= current:
                raise InvalidPartitionsError(
                    f"topic {name} has {current} partitions: the count can only grow, not "
                    f"become {count}"
                )
            if count > self.max_partitions_per_topic:
                raise InvalidPartitionsError(
                    f"{count} partitions pass the limit of {self.max_partitions_per_topic} per "
                    f"topic (the gateway's --max-partitions-per-topic)"
                )
            existing = sum(len(t.partitions) for t in self.topics.values())
            if existing + count - current > self.max_partitions:
                raise InvalidPartitionsError(
                    f"{count - current} more partitions would make "
                    f"{existing + count - current} in the cluster, over its limit of "
                    f"{self.max_partitions} (the gateway's --max-partitions)"
                )
            log_files.check_directory_name_fits(name, count)
            live = self.live_nodes()
            if not live:
                raise InvalidReplicationFactorError("no live storage node to place partitions on")
            if validate_only:
                return topic
            counts = {n: c for n, c in self.leader_counts().items() if n in live}
            for _ in range(count - current):
                leader = min(live, key=lambda n: (counts[n], n))
                counts[leader] += 1
                topic.partitions.append(PartitionAssignment([leader], leader, 0))
            self._save()
            return topic

    def alter_topic_configs(
        self,
        name: str,
        set_configs: dict[str, str],
        delete: list[str],
        *,
        validate_only: bool = False,
    ) -> Topic:
        """Kafka's IncrementalAlterConfigs: set some overrides, delete others (back to the
        node's or Kafka's default); the whole result is validated before anything changes."""
        if is_internal_topic(name):
            raise InvalidTopicError(f"topic {name!r} is internal: its configs are the cluster's")
        with self._lock:
            topic = self.topic(name)
            configs = {k: v for k, v in topic.configs.items() if k not in delete}
            configs.update(set_configs)
            try:
                check_config_names(delete)
                LogConfig().with_overrides(configs)
            except (InvalidConfigError, TypeError, ValueError) as exc:
                raise InvalidConfigError(f"topic {name}: {exc}") from None
            if validate_only:
                return topic
            topic.configs = configs
            self._save()
            return topic

    def delete_topic(self, name: str) -> Topic:
        if is_internal_topic(name):
            raise InvalidTopicError(f"topic {name!r} is internal: clients cannot delete it")
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
        with self._lock:
            topic = self.topic(topic_name)
            if not 0 <= partition < len(topic.partitions):
                raise UnknownTopicOrPartitionError(
                    f"{topic_name} has partitions 0..{len(topic.partitions) - 1}, not {partition}"
                )
            p = topic.partitions[partition]
            node = self.nodes.get(p.leader)
            reason = None if node is None else node.offline.get((topic_name, partition))
            if reason is not None:
                raise StorageError(
                    f"{topic_name}-{partition} is offline on node {p.leader}: {reason}"
                )
            return Route(
                topic_name,
                partition,
                p.leader,
                p.leader_epoch,
                node.address if node else None,
                self.is_live(p.leader),
            )
