"""The gateway's control plane: topic administration and cluster description (the Gateway
service's admin calls), and the Registry service that storage nodes call to register and
heartbeat. Produce, Fetch and ListOffsets are in service.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc

from seglog.errors import InvalidRequestError, LeaderNotAvailableError, SeglogError
from seglog.rpc.status import abort, error_from_rpc, set_error
from seglog.storage.config import described_configs
from seglog.v1 import gateway_pb2, storage_pb2

from .nodes import NodeConnections
from .registry import Registry

logger = logging.getLogger(__name__)

NODE_CALL_TIMEOUT_S = 30.0


class AdminService:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.registry = registry
        self.connections = connections
        # The gateway's own settings, Kafka's names where Kafka has them (DescribeConfigs).
        self.settings = dict(settings or {})
        # Called with a deleted topic's name (the offsets store drops its committed offsets).
        self.topic_deleted_listeners: list[Callable[[str], object]] = []

    # -- topics --------------------------------------------------------------------------

    def CreateTopics(
        self, request: gateway_pb2.CreateTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.CreateTopicsResponse:
        response = gateway_pb2.CreateTopicsResponse()
        for new in request.topics:
            result = response.topics.add(name=new.name)
            try:
                if request.validate_only:
                    self.registry.validate_new_topic(
                        new.name, new.num_partitions, new.replication_factor, dict(new.configs)
                    )
                    continue
                topic = self.registry.create_topic(
                    new.name, new.num_partitions, new.replication_factor, dict(new.configs)
                )
            except SeglogError as exc:
                set_error(result, exc)
                continue
            self._create_on_nodes(topic.name)
        return response

    def CreatePartitions(
        self, request: gateway_pb2.CreatePartitionsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.CreatePartitionsResponse:
        response = gateway_pb2.CreatePartitionsResponse()
        for wanted in request.topics:
            result = response.topics.add(name=wanted.topic)
            try:
                self.registry.create_partitions(
                    wanted.topic, wanted.count, validate_only=request.validate_only
                )
            except SeglogError as exc:
                set_error(result, exc)
                continue
            if not request.validate_only:
                self._create_on_nodes(wanted.topic)
        return response

    def DescribeConfigs(
        self, request: gateway_pb2.DescribeConfigsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeConfigsResponse:
        response = gateway_pb2.DescribeConfigsResponse()
        for name in request.topics:
            described = response.topics.add(topic=name)
            try:
                topic = self.registry.topic(name)
                leader = self.registry.nodes.get(topic.partitions[0].leader)
                node_defaults = leader.log_config_defaults if leader is not None else {}
                for key, value, source in described_configs(node_defaults, topic.configs):
                    described.entries.add(name=key, value=value, source=source)
            except SeglogError as exc:
                set_error(described, exc)
        if request.cluster:
            for key, value in sorted(self.settings.items()):
                response.gateway.add(name=key, value=value, source="gateway")
            for node_id, node in sorted(self.registry.nodes.items()):
                listed = response.nodes.add(node_id=node_id)
                for key, value in sorted(node.log_config_defaults.items()):
                    listed.entries.add(name=key, value=value, source="node")
        return response

    def AlterConfigs(
        self, request: gateway_pb2.AlterConfigsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.AlterConfigsResponse:
        response = gateway_pb2.AlterConfigsResponse()
        try:
            self.registry.alter_topic_configs(
                request.topic,
                dict(request.set),
                list(request.delete),
                validate_only=request.validate_only,
            )
        except SeglogError as exc:
            set_error(response, exc)
            return response
        if not request.validate_only:
            self._create_on_nodes(request.topic)  # the leaders take the new configs now
        return response

    def create_internal_topic(
        self, name: str, num_partitions: int, configs: dict[str, str]
    ) -> None:
        """For the gateway's own topics (`__consumer_offsets`): create, place, tell nodes."""
        self.registry.create_topic(name, num_partitions, 1, configs, internal=True)
        self._create_on_nodes(name)

    def _create_on_nodes(self, topic_name: str) -> None:
        """Tell each leader now; a node that misses this gets the partition from its next
        heartbeat's assignment."""
        topic = self.registry.topic(topic_name)
        calls = []
        for i, p in enumerate(topic.partitions):
            route = self.registry.route(topic_name, i)
            if route.address is None:
                continue
            stub = self.connections.get(p.leader, route.address).stub
            calls.append(
                stub.CreatePartition.future(
                    storage_pb2.CreatePartitionRequest(
                        topic=topic_name,
                        partition=i,
                        leader_epoch=p.leader_epoch,
                        configs=topic.configs,
                    ),
                    timeout=NODE_CALL_TIMEOUT_S,
                )
            )
        for call in calls:
            try:
                call.result()
            except grpc.RpcError as exc:
                logger.warning("creating a partition of %s on its node failed: %s", topic_name, exc)

    def DeleteTopics(
        self, request: gateway_pb2.DeleteTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DeleteTopicsResponse:
        response = gateway_pb2.DeleteTopicsResponse()
        for name in request.names:
            result = response.topics.add(name=name)
            try:
                topic = self.registry.delete_topic(name)
            except SeglogError as exc:
                set_error(result, exc)
                continue
            for i, p in enumerate(topic.partitions):
                node = self.registry.nodes.get(p.leader)
                if node is None:
                    continue
                try:
                    self.connections.get(p.leader, node.address).stub.DeletePartition(
                        storage_pb2.DeletePartitionRequest(topic=name, partition=i),
                        timeout=NODE_CALL_TIMEOUT_S,
                    )
                except grpc.RpcError as exc:
                    logger.warning("deleting %s-%d on node %d failed: %s", name, i, p.leader, exc)
            for listener in self.topic_deleted_listeners:
                try:
                    listener(name)
                except Exception as exc:  # noqa: BLE001 - the topic is gone either way
                    logger.warning("cleaning up after topic %s failed: %s", name, exc)
        return response

    def ListTopics(
        self, request: gateway_pb2.ListTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.ListTopicsResponse:
        response = gateway_pb2.ListTopicsResponse()
        for name in sorted(self.registry.topics):
            topic = self.registry.topics.get(name)
            if topic is None or (topic.internal and not request.include_internal):
                continue
            response.topics.add(
                name=name, num_partitions=len(topic.partitions), internal=topic.internal
            )
        return response

    def DescribeTopics(
        self, request: gateway_pb2.DescribeTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeTopicsResponse:
        names = list(request.names) or sorted(self.registry.topics)
        response = gateway_pb2.DescribeTopicsResponse()
        wanted: dict[int, list[tuple[str, int]]] = {}
        described: dict[tuple[str, int], gateway_pb2.PartitionDescription] = {}
        for name in names:
            description = response.topics.add(name=name)
            try:
                topic = self.registry.topic(name)
            except SeglogError as exc:
                set_error(description, exc)
                continue
            description.replication_factor = topic.replication_factor
            description.configs.update(topic.configs)
            for i, p in enumerate(topic.partitions):
                part = description.partitions.add(
                    partition=i, leader=p.leader, leader_epoch=p.leader_epoch
                )
                part.replicas.extend(p.replicas)
                part.log_start_offset = part.log_end_offset = -1
                described[(name, i)] = part
                wanted.setdefault(p.leader, []).append((name, i))
        self._fill_offsets(wanted, described)
        return response

    def _fill_offsets(
        self,
        wanted: dict[int, list[tuple[str, int]]],
        described: dict[tuple[str, int], gateway_pb2.PartitionDescription],
    ) -> None:
        calls = {}
        for node_id, partitions in wanted.items():
            node = self.registry.nodes.get(node_id)
            if node is None or not self.registry.is_live(node_id):
                error = LeaderNotAvailableError(f"node {node_id} is not available")
                for tp in partitions:
                    set_error(described[tp], error)
                continue
            ask = storage_pb2.DescribePartitionsRequest()
            for topic, partition in partitions:
                ask.partitions.add(topic=topic, partition=partition)
            stub = self.connections.get(node_id, node.address).stub
            calls[node_id] = stub.DescribePartitions.future(ask, timeout=5)
        for node_id, call in calls.items():
            try:
                for state in call.result().partitions:
                    part = described[(state.topic, state.partition)]
                    part.log_start_offset = state.log_start_offset
                    part.log_end_offset = state.log_end_offset
                    part.error = state.error
            except grpc.RpcError as exc:
                error = LeaderNotAvailableError(f"node {node_id}: {error_from_rpc(exc)}")
                for tp in wanted[node_id]:
                    set_error(described[tp], error)

    def DescribeCluster(
        self, request: gateway_pb2.DescribeClusterRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeClusterResponse:
        response = gateway_pb2.DescribeClusterResponse(
            session_timeout_ms=int(self.registry.session_timeout_s * 1000)
        )
        counts = self.registry.leader_counts()
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
            )
        return response


class RegistryService:
    """Node sessions: registration bumps the node's leader epochs (a new leadership term);
    each answer lists the partitions the node must host."""

    def __init__(self, registry: Registry, *, heartbeat_interval_ms: int = 2000) -> None:
        self.registry = registry
        self.heartbeat_interval_ms = heartbeat_interval_ms

    def RegisterNode(
        self, request: gateway_pb2.NodeHeartbeat, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeAssignment:
        if request.node_id < 0 or not request.address:
            abort(context, InvalidRequestError("a node registers with an id >= 0 and an address"))
        self.registry.register_node(
            request.node_id,
            request.address,
            _offline(request),
            dict(request.log_config_defaults),
        )
        logger.info("node %d registered at %s", request.node_id, request.address)
        return self._assignment(request.node_id)

    def Heartbeat(
        self, request: gateway_pb2.NodeHeartbeat, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeAssignment:
        if not self.registry.heartbeat(request.node_id, request.address, _offline(request)):
            return self.RegisterNode(request, context)
        return self._assignment(request.node_id)

    def _assignment(self, node_id: int) -> gateway_pb2.NodeAssignment:
        assignment = gateway_pb2.NodeAssignment(heartbeat_interval_ms=self.heartbeat_interval_ms)
        for topic, i, p in self.registry.assignment_for(node_id):
            assignment.partitions.add(
                topic=topic.name, partition=i, leader_epoch=p.leader_epoch, configs=topic.configs
            )
        return assignment


def _offline(heartbeat: gateway_pb2.NodeHeartbeat) -> dict[tuple[str, int], str]:
    return {
        (p.topic, p.partition): p.offline_reason for p in heartbeat.partitions if p.offline_reason
    }
