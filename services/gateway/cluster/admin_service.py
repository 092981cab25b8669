"""The Gateway service's admin calls on the gRPC API: topic administration (create, delete,
configs, more partitions) and producer ids as adapters over the core (topic_admin.py,
producer_ids.py); listing and describing topics, the cluster description and node states.
The Registry service that storage nodes call is in registry_service.py; Produce, Fetch and
ListOffsets are the data plane's (routing/)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from seglog.errors import (
    AuthenticationError,
    LeaderNotAvailableError,
    PermissionDeniedError,
    SeglogError,
)
from seglog.rpc import check_entries
from seglog.rpc.status import abort, error_from_rpc, set_error
from seglog.v1 import common_pb2, gateway_pb2, storage_pb2

from ..authorization import Authorization
from ..node_connections import NodeConnections
from .auto_create import TopicAutoCreation
from .producer_ids import ProducerIds
from .registry import Registry
from .topic_admin import ConfigChange, NewTopic, TopicAdmin, TopicOutcome

logger = logging.getLogger(__name__)


class AdminService:
    """The Gateway service's admin calls. Topic administration and producer ids are the
    core's (topic_admin.py, producer_ids.py), which authorize the caller themselves: these
    methods name the caller and translate. Listing and describing topics, the cluster and
    node states are the gRPC API's own (authorized by `Authorization.guard`)."""

    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        topics: TopicAdmin,
        producer_ids: ProducerIds,
        *,
        authorization: Authorization,
        cluster_view: Callable[[], tuple[str, list[str]]] | None = None,
    ) -> None:
        # The controller gateway's address and every running gateway's.
        self.cluster_view = cluster_view or (lambda: ("", []))
        self.registry = registry
        self.connections = connections
        self.topics = topics
        self.producer_ids = producer_ids
        self.authorization = authorization
        # Set by the gateway: DescribeTopics asking for it creates missing topics.
        self.auto_create: TopicAutoCreation | None = None

    # -- topics (the core's) -------------------------------------------------------------

    def CreateTopics(
        self, request: gateway_pb2.CreateTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.CreateTopicsResponse:
        wanted = [
            NewTopic(t.name, t.num_partitions, t.replication_factor, dict(t.configs))
            for t in request.topics
        ]
        try:
            caller = self.authorization.caller_of(context)
            outcomes = self.topics.create_topics(
                caller, wanted, validate_only=request.validate_only
            )
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.CreateTopicsResponse()
        for outcome in outcomes:
            _answer(response.topics.add(name=outcome.name), outcome).warning = outcome.warning
        return response

    def CreatePartitions(
        self, request: gateway_pb2.CreatePartitionsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.CreatePartitionsResponse:
        counts = [(t.topic, t.count) for t in request.topics]
        try:
            caller = self.authorization.caller_of(context)
            outcomes = self.topics.create_partitions(
                caller, counts, validate_only=request.validate_only
            )
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.CreatePartitionsResponse()
        for outcome in outcomes:
            _answer(response.topics.add(name=outcome.name), outcome)
        return response

    def DeleteTopics(
        self, request: gateway_pb2.DeleteTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DeleteTopicsResponse:
        try:
            caller = self.authorization.caller_of(context)
            outcomes = self.topics.delete_topics(caller, list(request.names))
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.DeleteTopicsResponse()
        for outcome in outcomes:
            _answer(response.topics.add(name=outcome.name), outcome)
        return response

    def DescribeConfigs(
        self, request: gateway_pb2.DescribeConfigsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeConfigsResponse:
        response = gateway_pb2.DescribeConfigsResponse()
        try:
            caller = self.authorization.caller_of(context)
            names = list(request.topics)
            described = self.topics.describe_configs(caller, names)
            cluster = self.topics.describe_cluster_configs(caller) if request.cluster else None
        except SeglogError as exc:
            abort(context, exc)
        for name, found in zip(names, described, strict=True):
            topic = response.topics.add(topic=name)
            if isinstance(found, SeglogError):
                set_error(topic, found)
                continue
            for key, value, source in found:
                topic.entries.add(name=key, value=value, source=source)
        if cluster is not None:
            for key, value in cluster.gateway:
                response.gateway.add(name=key, value=value, source="gateway")
            for node_id, entries in cluster.nodes.items():
                listed = response.nodes.add(node_id=node_id)
                for key, value in entries:
                    listed.entries.add(name=key, value=value, source="node")
        return response

    def AlterConfigs(
        self, request: gateway_pb2.AlterConfigsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.AlterConfigsResponse:
        change = ConfigChange(
            request.topic,
            dict(request.set),
            list(request.delete),
            dict(request.append),
            dict(request.subtract),
        )
        response = gateway_pb2.AlterConfigsResponse()
        try:
            caller = self.authorization.caller_of(context)
        except SeglogError as exc:
            abort(context, exc)
        try:
            self.topics.alter_configs(caller, change, validate_only=request.validate_only)
        except (AuthenticationError, PermissionDeniedError) as exc:
            abort(context, exc)
        except SeglogError as exc:
            set_error(response, exc)
        return response

    def ListTopics(
        self, request: gateway_pb2.ListTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.ListTopicsResponse:
        response = gateway_pb2.ListTopicsResponse()
        for name in sorted(self.registry.topics):
            topic = self.registry.topics.get(name)
            if topic is None or (topic.internal and not request.include_internal):
                continue
            if self.authorization is not None and not self.authorization.allowed(
                context, "Describe", "topic", name
            ):
                continue  # as Kafka: only the topics the principal may describe
            response.topics.add(
                name=name, num_partitions=len(topic.partitions), internal=topic.internal
            )
        return response

    def DescribeTopics(
        self, request: gateway_pb2.DescribeTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeTopicsResponse:
        try:
            check_entries(len(request.names), "DescribeTopics names")
        except SeglogError as exc:
            abort(context, exc)
        names = list(request.names) or sorted(self.registry.topics)
        missing = self._auto_create(request, context)
        response = gateway_pb2.DescribeTopicsResponse()
        wanted: dict[int, list[tuple[str, int]]] = {}
        described: dict[tuple[str, int], gateway_pb2.PartitionDescription] = {}
        for name in names:
            description = response.topics.add(name=name)
            try:
                refused = missing.get(name)
                if refused is not None:
                    raise refused
                topic = self.registry.topic(name)
            except SeglogError as exc:
                set_error(description, exc)
                continue
            description.replication_factor = topic.replication_factor
            description.topic_id = topic.topic_id
            description.configs.update(topic.configs)
            for i, p in enumerate(topic.partitions):
                part = description.partitions.add(
                    partition=i,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                )
                part.replicas.extend(p.replicas)
                part.isr.extend(p.isr)
                part.eligible_leader_replicas.extend(p.elr)
                part.log_start_offset = part.log_end_offset = part.high_watermark = -1
                if p.leader < 0:
                    set_error(
                        part,
                        LeaderNotAvailableError(f"offline: no replica of its ISR {p.isr} is live"),
                    )
                for replica in p.replicas:
                    part.replica_states.add(
                        node_id=replica,
                        log_end_offset=-1,
                        high_watermark=-1,
                        live=self.registry.is_live(replica),
                    )
                    wanted.setdefault(replica, []).append((name, i))
                described[(name, i)] = part
        self._fill_offsets(wanted, described)
        return response

    def _auto_create(
        self, request: gateway_pb2.DescribeTopicsRequest, context: grpc.ServicerContext
    ) -> dict[str, SeglogError | None]:
        """The named topics that do not exist, made when the request allows it (the seglog
        producer's first look at a topic, as Kafka's Metadata): auto_create.py."""
        if not (request.allow_auto_topic_creation and request.names):
            return {}
        if self.auto_create is None or self.authorization is None:
            return {}
        caller = self.authorization.caller_of(context)
        return self.auto_create.create_missing(caller, request.names, allowed=True)

    def _fill_offsets(
        self,
        wanted: dict[int, list[tuple[str, int]]],
        described: dict[tuple[str, int], gateway_pb2.PartitionDescription],
    ) -> None:
        """Ask every replica's node for its view (log start and end, high watermark); the
        leader's view is the partition's."""
        calls = {}
        for node_id, partitions in wanted.items():
            node = self.registry.nodes.get(node_id)
            if node is None or not self.registry.is_live(node_id):
                continue
            ask = storage_pb2.DescribePartitionsRequest()
            for topic, partition in partitions:
                ask.partitions.add(topic=topic, partition=partition)
            stub = self.connections.get(node_id, node.address).stub
            calls[node_id] = stub.DescribePartitions.future(ask, timeout=5)
        for node_id, call in calls.items():
            try:
                states = call.result().partitions
            except grpc.RpcError as exc:
                error = LeaderNotAvailableError(f"node {node_id}: {error_from_rpc(exc)}")
                for tp in wanted[node_id]:
                    if described[tp].leader == node_id:
                        set_error(described[tp], error)
                continue
            for state in states:
                part = described[(state.topic, state.partition)]
                for replica in part.replica_states:
                    if replica.node_id == node_id and state.error == common_pb2.NONE:
                        replica.log_end_offset = state.log_end_offset
                        replica.high_watermark = state.high_watermark
                if part.leader == node_id:
                    part.log_start_offset = state.log_start_offset
                    part.log_end_offset = state.log_end_offset
                    part.high_watermark = state.high_watermark
                    part.error = state.error
        for part in described.values():
            if part.leader >= 0 and part.log_end_offset < 0 and not part.error:
                set_error(part, LeaderNotAvailableError(f"node {part.leader} is not available"))

    def InitProducerId(
        self, request: gateway_pb2.InitProducerIdRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.InitProducerIdResponse:
        response = gateway_pb2.InitProducerIdResponse(producer_id=-1, producer_epoch=-1)
        try:
            caller = self.authorization.caller_of(context)
            given = self.producer_ids.init_producer_id(caller, request.transactional_id)
        except (AuthenticationError, PermissionDeniedError) as exc:
            abort(context, exc)
        except SeglogError as exc:  # a transactional id: answered, as before transactions
            set_error(response, exc)
            return response
        response.producer_id = given.producer_id
        response.producer_epoch = given.epoch
        return response

    def DescribeCluster(
        self, request: gateway_pb2.DescribeClusterRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeClusterResponse:
        controller, gateways = self.cluster_view()
        response = gateway_pb2.DescribeClusterResponse(
            session_timeout_ms=int(self.registry.session_timeout_s * 1000),
            controller=controller,
            gateways=gateways,
        )
        counts = self.registry.leader_counts()
        held = self.registry.replica_counts()
        decommissioned = self.registry.decommissioned_nodes()
        for node_id, node in sorted(self.registry.nodes.items()):
            age = -1
            if node.last_heartbeat is not None:
                age = int((time.monotonic() - node.last_heartbeat) * 1000)
            response.nodes.add(
                node_id=node_id,
                address=node.address,
                live=self.registry.is_live(node_id),
                last_heartbeat_age_ms=age,
                leader_partitions=counts.get(node_id, 0),
                decommissioned=node_id in decommissioned,
                replica_partitions=held.get(node_id, 0),
            )
        return response

    def DecommissionNode(
        self, request: gateway_pb2.NodeStateRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeStateResponse:
        return self._set_decommissioned(request.node_id, True, context)

    def RecommissionNode(
        self, request: gateway_pb2.NodeStateRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeStateResponse:
        return self._set_decommissioned(request.node_id, False, context)

    def _set_decommissioned(
        self, node_id: int, decommissioned: bool, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeStateResponse:
        try:
            moved = self.registry.set_decommissioned(node_id, decommissioned)
        except SeglogError as exc:
            abort(context, exc)
        logger.info(
            "node %d %s (%d leaderships handed over)",
            node_id,
            "decommissioned" if decommissioned else "recommissioned",
            len(moved),
        )
        return gateway_pb2.NodeStateResponse(leaderships_moved=len(moved))


def _answer(result: Any, outcome: TopicOutcome) -> Any:
    """A topic's result message with the outcome's error set, if any."""
    if outcome.error is not None:
        set_error(result, outcome.error)
    return result
