"""Listing and describing topics as the broker core does it, typed, for any caller: the
registry's view of each topic (replicas, ISR, leaders, configs) and every replica's own view
of its log (log start and end, high watermark), asked of the nodes at once. The gRPC
AdminService's ListTopics and DescribeTopics are adapters over `TopicDescriptions`.

Who may call: a listing shows only the topics the caller may Describe (as Kafka's Metadata);
describing named topics needs Describe on each, all topics Describe on the cluster, the
request refused whole otherwise (the gRPC API's contract).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc

from seglog.errors import LeaderNotAvailableError, SeglogError
from seglog.rpc import check_entries
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.v1 import common_pb2, storage_pb2

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from ..node_connections import NodeConnections
from .auto_create import TopicAutoCreation
from .metadata_image import Topic
from .registry import Registry

NODE_CALL_TIMEOUT_S = 5.0
UNKNOWN = -1


@dataclass(frozen=True)
class ListedTopic:
    name: str
    num_partitions: int
    internal: bool


@dataclass(frozen=True)
class ReplicaState:
    node_id: int
    log_end_offset: int  # -1: the node did not answer
    high_watermark: int
    live: bool


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: Sequence[int]
    isr: Sequence[int]
    eligible_leader_replicas: Sequence[int]
    replica_states: Sequence[ReplicaState]
    # The leader's view (-1 with an error): the partition's.
    log_start_offset: int = UNKNOWN
    log_end_offset: int = UNKNOWN
    high_watermark: int = UNKNOWN
    error: SeglogError | None = None


@dataclass(frozen=True)
class TopicDescription:
    name: str
    error: SeglogError | None = None
    replication_factor: int = 0
    topic_id: str = ""
    configs: Mapping[str, str] | None = None
    partitions: Sequence[PartitionDescription] = ()


@dataclass(frozen=True)
class _LogView:
    """One replica's answer about its log."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    error: SeglogError | None


class TopicDescriptions:
    def __init__(
        self, registry: Registry, connections: NodeConnections, authorization: Authorization
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.authorization = authorization
        # Set by the gateway: describing named topics may create the missing ones.
        self.auto_create: TopicAutoCreation | None = None

    def list_topics(self, caller: Caller, *, include_internal: bool) -> list[ListedTopic]:
        """The topics the caller may Describe, by name (internal ones only when asked)."""
        listed = []
        for name in sorted(self.registry.topics):
            topic = self.registry.topics.get(name)
            if topic is None or (topic.internal and not include_internal):
                continue
            if not self.authorization.allows(caller, "Describe", "topic", name):
                continue  # as Kafka: only the topics the principal may describe
            listed.append(ListedTopic(name, len(topic.partitions), topic.internal))
        return listed

    def describe_topics(
        self, caller: Caller, names: Sequence[str], *, allow_auto_topic_creation: bool = False
    ) -> list[TopicDescription]:
        """The named topics (all of them when none is named), in order; a topic that cannot
        be described answers its error in its place. PermissionDeniedError, before anything
        is done, when one may not be described."""
        check_entries(len(names), "DescribeTopics names")
        if names:
            needs = [("Describe", "topic", name) for name in names]
        else:
            needs = [("Describe", *CLUSTER)]
        self.authorization.check(caller, needs, "DescribeTopics")
        missing: dict[str, SeglogError | None] = {}
        if allow_auto_topic_creation and names and self.auto_create is not None:
            # The seglog producer's first look at a topic, as Kafka's Metadata (auto_create.py).
            missing = self.auto_create.create_missing(caller, names, allowed=True)
        named = list(names) or sorted(self.registry.topics)
        found: list[tuple[str, Topic | SeglogError]] = []
        wanted: dict[int, list[tuple[str, int]]] = {}
        for name in named:
            try:
                refused = missing.get(name)
                if refused is not None:
                    raise refused
                topic = self.registry.topic(name)
            except SeglogError as exc:
                found.append((name, exc))
                continue
            found.append((name, topic))
            for i, p in enumerate(topic.partitions):
                for replica in p.replicas:
                    wanted.setdefault(replica, []).append((name, i))
        views, failed = self._log_views(wanted)
        return [
            TopicDescription(name, topic)
            if isinstance(topic, SeglogError)
            else self._described(name, topic, views, failed)
            for name, topic in found
        ]

    def _described(
        self,
        name: str,
        topic: Topic,
        views: dict[tuple[int, str, int], _LogView],
        failed: dict[int, SeglogError],
    ) -> TopicDescription:
        partitions = []
        for i, p in enumerate(topic.partitions):
            states = []
            for replica in p.replicas:
                view = views.get((replica, name, i))
                answered = view is not None and view.error is None
                states.append(
                    ReplicaState(
                        replica,
                        view.log_end_offset if answered and view else UNKNOWN,
                        view.high_watermark if answered and view else UNKNOWN,
                        self.registry.is_live(replica),
                    )
                )
            error: SeglogError | None = None
            leader_view = views.get((p.leader, name, i))
            if p.leader < 0:
                error = LeaderNotAvailableError(f"offline: no replica of its ISR {p.isr} is live")
            elif leader_view is not None:
                error = leader_view.error
            elif p.leader in failed:
                error = failed[p.leader]
            else:
                error = LeaderNotAvailableError(f"node {p.leader} is not available")
            partitions.append(
                PartitionDescription(
                    i,
                    p.leader,
                    p.leader_epoch,
                    p.partition_epoch,
                    list(p.replicas),
                    list(p.isr),
                    list(p.elr),
                    states,
                    *(
                        (
                            leader_view.log_start_offset,
                            leader_view.log_end_offset,
                            leader_view.high_watermark,
                        )
                        if leader_view is not None and p.leader >= 0
                        else (UNKNOWN, UNKNOWN, UNKNOWN)
                    ),
                    error,
                )
            )
        return TopicDescription(
            name,
            None,
            topic.replication_factor,
            topic.topic_id,
            dict(topic.configs),
            partitions,
        )

    def _log_views(
        self, wanted: dict[int, list[tuple[str, int]]]
    ) -> tuple[dict[tuple[int, str, int], _LogView], dict[int, SeglogError]]:
        """Every live replica's view of its logs, by (node, topic, partition), all nodes asked
        at once; and the error of each node whose call failed."""
        calls = {}
        for node_id, partitions in wanted.items():
            node = self.registry.nodes.get(node_id)
            if node is None or not self.registry.is_live(node_id):
                continue
            ask = storage_pb2.DescribePartitionsRequest()
            for topic, partition in partitions:
                ask.partitions.add(topic=topic, partition=partition)
            stub = self.connections.get(node_id, node.address).stub
            calls[node_id] = stub.DescribePartitions.future(ask, timeout=NODE_CALL_TIMEOUT_S)
        views: dict[tuple[int, str, int], _LogView] = {}
        failed: dict[int, SeglogError] = {}
        for node_id, call in calls.items():
            try:
                states = call.result().partitions
            except grpc.RpcError as exc:
                failed[node_id] = LeaderNotAvailableError(f"node {node_id}: {error_from_rpc(exc)}")
                continue
            for state in states:
                views[(node_id, state.topic, state.partition)] = _LogView(
                    state.log_start_offset,
                    state.log_end_offset,
                    state.high_watermark,
                    None
                    if state.error == common_pb2.NONE
                    # PartitionState carries a code alone (storage.proto): name it.
                    else error_from_code(
                        state.error,
                        f"node {node_id}: {common_pb2.ErrorCode.Name(state.error)}",
                    ),
                )
        return views, failed
