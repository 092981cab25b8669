"""The Gateway service's admin calls: topic administration (create, delete, configs, more
partitions), cluster description and producer ids. The Registry service that storage nodes
call is in registry_service.py; Produce, Fetch and ListOffsets are the data plane's
(routing/)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from seglog.errors import InvalidRequestError, LeaderNotAvailableError, SeglogError
from seglog.rpc import check_entries
from seglog.rpc.status import abort, error_from_rpc, set_error
from seglog.storage.config import described_configs
from seglog.v1 import common_pb2, gateway_pb2, storage_pb2

from ..authorization import Authorization
from ..node_connections import NodeConnections
from .auto_create import TopicAutoCreation
from .controller import partition_states
from .registry import Registry

logger = logging.getLogger(__name__)

NODE_CALL_TIMEOUT_S = 30.0


class AdminService:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        settings: dict[str, str] | None = None,
        *,
        offsets_topic_replication_factor: int = 3,
        authorization: Authorization | None = None,
        cluster_view: Callable[[], tuple[str, list[str]]] | None = None,
    ) -> None:
        # The controller gateway's address and every running gateway's.
        self.cluster_view = cluster_view or (lambda: ("", []))
        self.registry = registry
        self.authorization = authorization
        self.offsets_topic_replication_factor = offsets_topic_replication_factor
        self._producer_ids: Iterator[int] | None = None
        self._producer_ids_lock = threading.Lock()
        self.connections = connections
        # The gateway's own settings, Kafka's names where Kafka has them (DescribeConfigs).
        self.settings = dict(settings or {})
        # Called with a deleted topic's name (the offsets store drops its committed offsets).
        self.topic_deleted_listeners: list[Callable[[str], object]] = []
        # Set by the gateway: DescribeTopics asking for it creates missing topics.
        self.auto_create: TopicAutoCreation | None = None

    # -- topics --------------------------------------------------------------------------

    def CreateTopics(
        self, request: gateway_pb2.CreateTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.CreateTopicsResponse:
        response = gateway_pb2.CreateTopicsResponse()
        for new in request.topics:
            result = response.topics.add(name=new.name)
            try:
                if request.validate_only:
                    _, replication_factor = self.registry.validate_new_topic(
                        new.name, new.num_partitions, new.replication_factor, dict(new.configs)
                    )
                    result.warning = self.registry.min_isr_shortfall(
                        replication_factor, new.configs
                    )
                    continue
                topic = self.registry.create_topic(
                    new.name, new.num_partitions, new.replication_factor, dict(new.configs)
                )
            except SeglogError as exc:
                set_error(result, exc)
                continue
            # Said at once, not left to the first producer's 120 s of retries.
            result.warning = self.registry.min_isr_shortfall(
                topic.replication_factor, topic.configs
            )
            if result.warning:
                logger.warning("topic %s created: %s", topic.name, result.warning)
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
                append=dict(request.append),
                subtract=dict(request.subtract),
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
        """For the gateway's own topics (`__consumer_offsets`): create, place, tell nodes.
        Replicated `offsets.topic.replication.factor` times, or on every live node when
        fewer are up (Kafka would wait for enough brokers; a small cluster should work)."""
        live = len(self.registry.placeable_nodes())
        replication_factor = max(1, min(self.offsets_topic_replication_factor, live))
        self.registry.create_topic(name, num_partitions, replication_factor, configs, internal=True)
        self._create_on_nodes(name)

    def create_default_topic(self, name: str) -> None:
        """A topic of num.partitions and default.replication.factor, on its nodes when this
        returns (topic auto-creation, auto_create.py)."""
        topic = self.registry.create_topic(name, -1, -1, {})
        warning = self.registry.min_isr_shortfall(topic.replication_factor, topic.configs)
        if warning:
            logger.warning("topic %s created: %s", name, warning)
        self._create_on_nodes(name)

    def _create_on_nodes(self, topic_name: str) -> None:
        """Tell every replica's node now, so the leaders serve as soon as this returns; a
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
        for call in calls:
            try:
                call.result()
            except grpc.RpcError as exc:
                logger.warning("creating partitions of %s on a node failed: %s", topic_name, exc)

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
            addresses = self.registry.addresses()
            for i, p in enumerate(topic.partitions):
                for replica in p.replicas:
                    if replica not in addresses:
                        continue
                    try:
                        self.connections.get(replica, addresses[replica]).stub.DeletePartition(
                            storage_pb2.DeletePartitionRequest(
                                topic=name, partition=i, cluster_id=self.registry.cluster_id
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
        if request.transactional_id:
            set_error(
                response,
                InvalidRequestError("transactions are not supported: leave transactional_id empty"),
            )
            return response
        with self._producer_ids_lock:
            if not self._producer_ids:
                self._producer_ids = iter(self.registry.allocate_producer_ids())
            producer_id = next(self._producer_ids, None)
            if producer_id is None:
                self._producer_ids = iter(self.registry.allocate_producer_ids())
                producer_id = next(self._producer_ids)
        response.producer_id = producer_id
        response.producer_epoch = 0
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
