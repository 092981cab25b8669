"""The Gateway service's admin calls on the gRPC API, adapters over the core: topic
administration (create, delete, configs, more partitions: topic_admin.py), producer ids
(producer_ids.py), listing and describing topics (topic_descriptions.py), the cluster
description and node states (node_admin.py).
The Registry service that storage nodes call is in registry_service.py; Produce, Fetch and
ListOffsets are the data plane's (routing/)."""

from __future__ import annotations

from typing import Any

import grpc

from seglog.errors import AuthenticationError, PermissionDeniedError, SeglogError
from seglog.rpc.status import abort, set_error
from seglog.v1 import gateway_pb2

from ..authorization import Authorization
from .node_admin import NodeAdmin
from .producer_ids import ProducerIds
from .topic_admin import ConfigChange, NewTopic, TopicAdmin, TopicOutcome
from .topic_descriptions import TopicDescription, TopicDescriptions


class AdminService:
    """The Gateway service's admin calls. The core's objects authorize the caller
    themselves: these methods name the caller and translate."""

    def __init__(
        self,
        topics: TopicAdmin,
        producer_ids: ProducerIds,
        descriptions: TopicDescriptions,
        nodes: NodeAdmin,
        *,
        authorization: Authorization,
    ) -> None:
        self.topics = topics
        self.producer_ids = producer_ids
        self.descriptions = descriptions
        self.nodes = nodes
        self.authorization = authorization

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

    # -- listing and describing (the core's: topic_descriptions.py) ------------------------

    def ListTopics(
        self, request: gateway_pb2.ListTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.ListTopicsResponse:
        try:
            caller = self.authorization.caller_of(context)
            listed = self.descriptions.list_topics(
                caller, include_internal=request.include_internal
            )
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.ListTopicsResponse()
        for topic in listed:
            response.topics.add(
                name=topic.name, num_partitions=topic.num_partitions, internal=topic.internal
            )
        return response

    def DescribeTopics(
        self, request: gateway_pb2.DescribeTopicsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeTopicsResponse:
        try:
            caller = self.authorization.caller_of(context)
            described = self.descriptions.describe_topics(
                caller,
                list(request.names),
                allow_auto_topic_creation=request.allow_auto_topic_creation,
            )
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.DescribeTopicsResponse()
        for topic in described:
            _describe_topic(response.topics.add(name=topic.name), topic)
        return response

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

    # -- the cluster's nodes (the core's: node_admin.py) -----------------------------------

    def DescribeCluster(
        self, request: gateway_pb2.DescribeClusterRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeClusterResponse:
        try:
            described = self.nodes.describe_cluster(self.authorization.caller_of(context))
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.DescribeClusterResponse(
            session_timeout_ms=described.session_timeout_ms,
            controller=described.controller,
            gateways=described.gateways,
        )
        for node in described.nodes:
            response.nodes.add(
                node_id=node.node_id,
                address=node.address,
                live=node.live,
                last_heartbeat_age_ms=node.last_heartbeat_age_ms,
                leader_partitions=node.leader_partitions,
                decommissioned=node.decommissioned,
                replica_partitions=node.replica_partitions,
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
            caller = self.authorization.caller_of(context)
            moved = self.nodes.set_decommissioned(caller, node_id, decommissioned)
        except SeglogError as exc:
            abort(context, exc)
        return gateway_pb2.NodeStateResponse(leaderships_moved=moved)


def _describe_topic(out: gateway_pb2.TopicDescription, topic: TopicDescription) -> None:
    if topic.error is not None:
        set_error(out, topic.error)
        return
    out.replication_factor = topic.replication_factor
    out.topic_id = topic.topic_id
    out.configs.update(topic.configs or {})
    for p in topic.partitions:
        part = out.partitions.add(
            partition=p.partition,
            leader=p.leader,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            log_start_offset=p.log_start_offset,
            log_end_offset=p.log_end_offset,
            high_watermark=p.high_watermark,
        )
        part.replicas.extend(p.replicas)
        part.isr.extend(p.isr)
        part.eligible_leader_replicas.extend(p.eligible_leader_replicas)
        if p.error is not None:
            set_error(part, p.error)
        for r in p.replica_states:
            part.replica_states.add(
                node_id=r.node_id,
                log_end_offset=r.log_end_offset,
                high_watermark=r.high_watermark,
                live=r.live,
            )


def _answer(result: Any, outcome: TopicOutcome) -> Any:
    """A topic's result message with the outcome's error set, if any."""
    if outcome.error is not None:
        set_error(result, outcome.error)
    return result
