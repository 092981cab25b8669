"""Moving partitions over Kafka's protocol, each through the gateway's own servicer
(cluster/reassignment_service.py), so Kafka's admin clients and tools (kafka-reassign-
partitions, kafka-leader-election, kafka-log-dirs) reach the same decisions and ACLs:

- AlterPartitionReassignments 0–1: seglog checks a request whole and changes nothing when
  one partition is refused, so such an answer carries that error on every partition (its
  message names the culprit). Replication-factor changes are allowed, as in Kafka's v0.
  The throttle is seglog's own (`seglog topics reassign --throttle`): Kafka's throttle
  configs are not read.
- ListPartitionReassignments 0, ElectLeaders 0–2 (preferred, unclean).
- DescribeLogDirs 1–4: the gateway is the broker, so its "log dirs" are the storage nodes,
  one per node, named `node-<id>` (a node that did not answer carries its error).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from seglog.errors import PermissionDeniedError, SeglogError
from seglog.v1 import common_pb2, gateway_pb2

from .api_table import ApiTable
from .error_codes import NONE, kafka_error_code
from .kafka_call import KafkaCall

UNCLEAN = 1  # Kafka's ElectionType


def _cluster_error(exc: SeglogError) -> int:
    return kafka_error_code(exc, "cluster" if isinstance(exc, PermissionDeniedError) else "topic")


def alter_partition_reassignments(call: KafkaCall, request: Any) -> Any:
    response_class = AlterPartitionReassignmentsResponse[call.version]
    topic_class = response_class.ReassignableTopicResponse
    partition_class = topic_class.ReassignablePartitionResponse
    proto = gateway_pb2.AlterPartitionReassignmentsRequest()
    for topic in request.topics:
        for p in topic.partitions:
            proto.partitions.add(
                topic=topic.name,
                partition=p.partition_index,
                replicas=p.replicas or [],
                cancel=p.replicas is None,
            )
    error, message = NONE, None
    service = call.core.reassignment_service
    try:
        call.invoke("AlterPartitionReassignments", service.AlterPartitionReassignments, proto)
    except PermissionDeniedError as exc:  # Kafka answers it at the top
        return response_class(
            throttle_time_ms=0, error_code=_cluster_error(exc), error_message=str(exc), responses=[]
        )
    except SeglogError as exc:
        error, message = kafka_error_code(exc), str(exc)
    responses = [
        topic_class(
            name=topic.name,
            partitions=[
                partition_class(
                    partition_index=p.partition_index, error_code=error, error_message=message
                )
                for p in topic.partitions
            ],
        )
        for topic in request.topics
    ]
    return response_class(
        throttle_time_ms=0, error_code=NONE, error_message=None, responses=responses
    )


def list_partition_reassignments(call: KafkaCall, request: Any) -> Any:
    response_class = ListPartitionReassignmentsResponse[call.version]
    topic_class = response_class.OngoingTopicReassignment
    partition_class = topic_class.OngoingPartitionReassignment
    proto = gateway_pb2.ListPartitionReassignmentsRequest()
    for topic in request.topics or []:
        for i in topic.partition_indexes:
            proto.partitions.add(topic=topic.name, partition=i)
    if request.topics is not None and not proto.partitions:
        return response_class(throttle_time_ms=0, error_code=NONE, error_message=None, topics=[])
    service = call.core.reassignment_service
    try:
        answer = call.invoke(
            "ListPartitionReassignments", service.ListPartitionReassignments, proto
        )
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0, error_code=_cluster_error(exc), error_message=str(exc), topics=[]
        )
    by_topic: dict[str, list[Any]] = {}
    for r in answer.reassignments:
        by_topic.setdefault(r.topic, []).append(
            partition_class(
                partition_index=r.partition,
                replicas=list(r.replicas),
                adding_replicas=list(r.adding_replicas),
                removing_replicas=list(r.removing_replicas),
            )
        )
    topics = [topic_class(name=name, partitions=parts) for name, parts in sorted(by_topic.items())]
    return response_class(throttle_time_ms=0, error_code=NONE, error_message=None, topics=topics)


def elect_leaders(call: KafkaCall, request: Any) -> Any:
    response_class = ElectLeadersResponse[call.version]
    topic_class = response_class.ReplicaElectionResult
    partition_class = topic_class.PartitionResult
    election_type = getattr(request, "election_type", 0)
    proto = gateway_pb2.ElectLeadersRequest(
        election_type=gateway_pb2.UNCLEAN if election_type == UNCLEAN else gateway_pb2.PREFERRED
    )
    for topic in request.topic_partitions or []:
        for i in topic.partitions:
            proto.partitions.add(topic=topic.topic, partition=i)
    service = call.core.reassignment_service
    try:
        answer = call.invoke("ElectLeaders", service.ElectLeaders, proto)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0, error_code=_cluster_error(exc), replica_election_results=[]
        )
    by_topic: dict[str, list[Any]] = {}
    for r in answer.partitions:
        error = NONE
        if r.error != common_pb2.NONE:
            error = kafka_error_code(common_pb2.ErrorCode.Name(r.error))
        by_topic.setdefault(r.topic, []).append(
            partition_class(
                partition_id=r.partition,
                error_code=error,
                error_message=r.error_message or None,
            )
        )
    results = [topic_class(topic=name, partition_result=parts) for name, parts in by_topic.items()]
    return response_class(throttle_time_ms=0, error_code=NONE, replica_election_results=results)


def describe_log_dirs(call: KafkaCall, request: Any) -> Any:
    response_class = DescribeLogDirsResponse[call.version]
    result_class = response_class.DescribeLogDirsResult
    topic_class = result_class.DescribeLogDirsTopic
    partition_class = topic_class.DescribeLogDirsPartition
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, i) for t in request.topics for i in t.partitions}
    service = call.core.reassignment_service
    try:
        answer = call.invoke(
            "DescribeLogDirs", service.DescribeLogDirs, gateway_pb2.DescribeLogDirsRequest()
        )
    except SeglogError as exc:
        return response_class(throttle_time_ms=0, error_code=_cluster_error(exc), results=[])
    results = []
    for node in answer.nodes:
        by_topic: dict[str, list[Any]] = {}
        for p in node.partitions:
            if wanted is not None and (p.topic, p.partition) not in wanted:
                continue
            by_topic.setdefault(p.topic, []).append(
                partition_class(
                    partition_index=p.partition,
                    partition_size=p.size_bytes,
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        error = NONE
        if node.error != common_pb2.NONE:
            error = kafka_error_code(common_pb2.ErrorCode.Name(node.error))
        results.append(
            result_class(
                error_code=error,
                log_dir=f"node-{node.node_id}",
                topics=[topic_class(name=n, partitions=ps) for n, ps in sorted(by_topic.items())],
                total_bytes=-1,
                usable_bytes=-1,
            )
        )
    return response_class(throttle_time_ms=0, error_code=NONE, results=results)


def register(table: ApiTable) -> None:
    table.register(AlterPartitionReassignmentsRequest, 0, 1, alter_partition_reassignments)
    table.register(ListPartitionReassignmentsRequest, 0, 0, list_partition_reassignments)
    table.register(ElectLeadersRequest, 0, 2, elect_leaders)
    table.register(DescribeLogDirsRequest, 1, 4, describe_log_dirs)
