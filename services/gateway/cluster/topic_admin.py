"""Topic administration as the broker core does it, typed, for any caller: create, delete,
add partitions, describe and alter configs. The gRPC AdminService and the Kafka listener's
admin and config APIs are adapters over `TopicAdmin`.

Who may call: Kafka's rules, checked here before any work: Create on each topic to create,
Delete to delete, Alter to add partitions, DescribeConfigs / AlterConfigs on the topic (and
DescribeConfigs on the cluster for the gateway's and nodes' settings). A request of several
topics is refused whole when one of them is not allowed (the gRPC API's contract); Kafka's
adapter asks one topic at a time, so each of its topics answers its own error, as Kafka's
broker does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import grpc

from seglog.errors import SeglogError
from seglog.storage.config import described_configs
from seglog.v1 import gateway_pb2, storage_pb2

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from ..node_connections import NodeConnections
from .controller import partition_states
from .registry import Registry

logger = logging.getLogger(__name__)

NODE_CALL_TIMEOUT_S = 30.0
# (name, value, source): source "default", "topic", "node" or "gateway".
DescribedConfig = tuple[str, str, str]


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int  # <= 0: num.partitions
    replication_factor: int  # <= 0: default.replication.factor
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicOutcome:
    """One topic's answer: its error (None when done) and, for a creation, what the caller
    should hear at once (a durability that cannot be met: min.insync.replicas)."""

    name: str
    error: SeglogError | None = None
    warning: str = ""


@dataclass(frozen=True)
class ConfigChange:
    """Changes to one topic's configs (Kafka's Set/Delete/Append/Subtract operations)."""

    topic: str
    set: Mapping[str, str] = field(default_factory=dict)
    delete: Sequence[str] = ()
    append: Mapping[str, str] = field(default_factory=dict)
    subtract: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterConfigs:
    gateway: list[tuple[str, str]]  # the gateway's own settings, Kafka's names
    nodes: dict[int, list[tuple[str, str]]]  # each node's log config defaults


class TopicAdmin:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        authorization: Authorization,
        settings: Mapping[str, str] | None = None,
        *,
        offsets_topic_replication_factor: int = 3,
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.authorization = authorization
        # The gateway's own settings, Kafka's names where Kafka has them (DescribeConfigs).
        self.settings = dict(settings or {})
        self.offsets_topic_replication_factor = offsets_topic_replication_factor
        # Called with a deleted topic's name (the offsets store drops its committed offsets).
        self.topic_deleted_listeners: list[Callable[[str], object]] = []

    def _check_topics(self, caller: Caller, operation: str, names: Sequence[str], api: str) -> None:
        self.authorization.check(caller, [(operation, "topic", n) for n in names], api)

    # -- create, delete, more partitions -------------------------------------------------

    def create_topics(
        self, caller: Caller, topics: Sequence[NewTopic], *, validate_only: bool
    ) -> list[TopicOutcome]:
        self._check_topics(caller, "Create", [t.name for t in topics], "CreateTopics")
        return [self._create(new, validate_only) for new in topics]

    def _create(self, new: NewTopic, validate_only: bool) -> TopicOutcome:
        registry = self.registry
        try:
            if validate_only:
                _, replication_factor = registry.validate_new_topic(
                    new.name, new.num_partitions, new.replication_factor, dict(new.configs)
                )
                warning = registry.min_isr_shortfall(replication_factor, new.configs)
                return TopicOutcome(new.name, warning=warning)
            topic = registry.create_topic(
                new.name, new.num_partitions, new.replication_factor, dict(new.configs)
            )
        except SeglogError as exc:
            return TopicOutcome(new.name, exc)
        # Said at once, not left to the first producer's 120 s of retries.
        warning = registry.min_isr_shortfall(topic.replication_factor, topic.configs)
        if warning:
            logger.warning("topic %s created: %s", topic.name, warning)
        self._create_on_nodes(topic.name)
        return TopicOutcome(new.name, warning=warning)

    def create_partitions(
        self, caller: Caller, counts: Sequence[tuple[str, int]], *, validate_only: bool
    ) -> list[TopicOutcome]:
        """Each topic grown to its count of partitions."""
        self._check_topics(caller, "Alter", [name for name, _ in counts], "CreatePartitions")
        outcomes = []
        for name, count in counts:
            try:
                self.registry.create_partitions(name, count, validate_only=validate_only)
            except SeglogError as exc:
                outcomes.append(TopicOutcome(name, exc))
                continue
            if not validate_only:
                self._create_on_nodes(name)
            outcomes.append(TopicOutcome(name))
        return outcomes

    def delete_topics(self, caller: Caller, names: Sequence[str]) -> list[TopicOutcome]:
        self._check_topics(caller, "Delete", names, "DeleteTopics")
        return [self._delete(name) for name in names]

    def _delete(self, name: str) -> TopicOutcome:
        try:
            topic = self.registry.delete_topic(name)
        except SeglogError as exc:
            return TopicOutcome(name, exc)
        addresses = self.registry.addresses()
        for i, p in enumerate(topic.partitions):
            for replica in p.replicas:
                if replica not in addresses:
                    continue
                try:
                    self.connections.get(replica, addresses[replica]).stub.DeletePartition(
                        storage_pb2.DeletePartitionRequest(
                            topic=name,
                            partition=i,
                            cluster_id=self.registry.cluster_id,
                            topic_id=topic.topic_id,
                        ),
                        timeout=NODE_CALL_TIMEOUT_S,
                    )
                except grpc.RpcError as exc:  # its next heartbeat sets the partition aside
                    logger.warning(
                        "deleting %s-%d on node %d failed: %s", name, i, replica, exc.code()
                    )
        for listener in self.topic_deleted_listeners:
            try:
                listener(name)
            except Exception as exc:  # the topic is gone either way
                logger.warning("cleaning up after topic %s failed: %s", name, exc)
        return TopicOutcome(name)

    def create_internal_topic(
        self, name: str, num_partitions: int, configs: dict[str, str]
    ) -> None:
        """For the gateway's own topics (`__consumer_offsets`): create, place, tell nodes.
        Replicated `offsets.topic.replication.factor` times, or on every live node when
        fewer are up (Kafka would wait for enough brokers; a small cluster should work)."""
        live = len(self.registry.placeable_nodes())
        replication_factor = max(1, min(self.offsets_topic_replication_factor, live))
        self.registry.create_topic(name, num_partitions, replication_factor, configs, internal=True)
        self._create_on_nodes(name)

    def start_default_topic(self, name: str, configs: dict[str, str] | None = None) -> Future[None]:
        """A topic of num.partitions and default.replication.factor (and `configs`), in the
        registry when this returns; the future completes once its nodes have been told (topic
        auto-creation, auto_create.py, which authorizes its caller)."""
        topic = self.registry.create_topic(name, -1, -1, dict(configs or {}))
        warning = self.registry.min_isr_shortfall(topic.replication_factor, topic.configs)
        if warning:
            logger.warning("topic %s created: %s", name, warning)
        return self._start_on_nodes(name)

    def _create_on_nodes(self, topic_name: str) -> None:
        self._start_on_nodes(topic_name).result()

    def _start_on_nodes(self, topic_name: str) -> Future[None]:
        """Tell every replica's node now, so the leaders serve as soon as the future
        completes (when every node has answered or its call failed: no thread waits); a
        node that misses this gets the partitions from its next heartbeat's answer."""
        topic = self.registry.topic(topic_name)
        wanted = [(topic_name, i) for i in range(len(topic.partitions))]
        addresses = self.registry.addresses()
        states = partition_states(self.registry, wanted)
        calls = []
        for node_id in sorted({r for p in topic.partitions for r in p.replicas}):
            if node_id not in addresses:
                continue
            stub = self.connections.get(node_id, addresses[node_id]).stub
            message = gateway_pb2.NodeAssignment(
                node_addresses=states.node_addresses,
                node_bulk_addresses=states.node_bulk_addresses,
            )
            message.partitions.extend(s for s in states.partitions if node_id in s.replicas)
            calls.append(stub.UpdatePartitions.future(message, timeout=NODE_CALL_TIMEOUT_S))
        told: Future[None] = Future()
        left = [len(calls)]
        lock = threading.Lock()

        def answered(call: Any) -> None:
            try:
                call.result()
            except grpc.RpcError as exc:
                logger.warning("creating partitions of %s on a node failed: %s", topic_name, exc)
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                told.set_result(None)

        if not calls:
            told.set_result(None)
        for call in calls:
            call.add_done_callback(answered)
        return told

    # -- configs -------------------------------------------------------------------------

    def describe_configs(
        self, caller: Caller, names: Sequence[str]
    ) -> list[list[DescribedConfig] | SeglogError]:
        """Each topic's configs, every one Kafka has, with where its value comes from; or
        why not (no such topic)."""
        self._check_topics(caller, "DescribeConfigs", names, "DescribeConfigs")
        out: list[list[DescribedConfig] | SeglogError] = []
        for name in names:
            try:
                topic = self.registry.topic(name)
            except SeglogError as exc:
                out.append(exc)
                continue
            leader = self.registry.nodes.get(topic.partitions[0].leader)
            node_defaults = leader.log_config_defaults if leader is not None else {}
            out.append(described_configs(node_defaults, topic.configs))
        return out

    def describe_cluster_configs(self, caller: Caller) -> ClusterConfigs:
        self.authorization.check(caller, [("DescribeConfigs", *CLUSTER)], "DescribeConfigs")
        return ClusterConfigs(
            sorted(self.settings.items()),
            {
                node_id: sorted(node.log_config_defaults.items())
                for node_id, node in sorted(self.registry.nodes.items())
            },
        )

    def alter_configs(self, caller: Caller, change: ConfigChange, *, validate_only: bool) -> None:
        """The topic's configs changed (all checked first; SeglogError why not), and its
        leaders told at once."""
        self._check_topics(caller, "AlterConfigs", [change.topic], "AlterConfigs")
        self.registry.alter_topic_configs(
            change.topic,
            dict(change.set),
            list(change.delete),
            append=dict(change.append),
            subtract=dict(change.subtract),
            validate_only=validate_only,
        )
        if not validate_only:
            self._create_on_nodes(change.topic)  # the leaders take the new configs now
