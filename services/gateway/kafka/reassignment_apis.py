"""Moving partitions over Kafka's protocol: a thin adapter over the broker core's
`PartitionMoves` (cluster/partition_moves.py), so Kafka's admin clients and tools
(kafka-reassign-partitions, kafka-leader-election, kafka-log-dirs) reach the same decisions
and ACLs as the gRPC API, on the node ids Metadata lists as brokers (brokers.py).

- AlterPartitionReassignments 0–1: seglog checks a request whole and changes nothing when
  one partition is refused, so such an answer carries that error on every partition (its
  message names the culprit). Replication-factor changes are allowed, as in Kafka's v0.
  The move's throttle comes from the replication throttle configs the tool set just before
  (cluster/replication_throttles.py says how).
- ListPartitionReassignments 0, ElectLeaders 0–2 (preferred, unclean; v0 is preferred).
- DescribeLogDirs 1–4: a broker answers for itself, and a broker here is a node at a lane of
  its own (brokers.py), so the answer is the log dir of the node whose lane the request came
  in on (every live node's on the listener's own port when it is no node's), named
  `node-<id>`. A node that did not answer carries its error.

Kafka's codes: a refused whole request (authorization) in the top-level error where the
version has one; per partition otherwise.
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

from ..cluster.partition_moves import AlterReassignments, ElectionType, ReplicaTarget
from .api_table import ApiTable
from .brokers import nodes_on_lane
from .error_codes import NONE, kafka_error_code
from .kafka_call import KafkaCall

UNCLEAN = 1  # Kafka's ElectionType


def _cluster_error(exc: SeglogError) -> int:
    return kafka_error_code(exc, "cluster" if isinstance(exc, PermissionDeniedError) else "topic")


def alter_partition_reassignments(call: KafkaCall, request: Any) -> Any:
    response_class = AlterPartitionReassignmentsResponse[call.version]
    topic_class = response_class.ReassignableTopicResponse
    partition_class = topic_class.ReassignablePartitionResponse
    targets = tuple(
        ReplicaTarget(
            topic.name, p.partition_index, None if p.replicas is None else tuple(p.replicas)
        )
        for topic in request.topics
        for p in topic.partitions
    )
    error, message = NONE, None
    try:
        call.core.partition_moves.alter(call.caller, AlterReassignments(targets))
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
    wanted = None
    if request.topics is not None:
        wanted = [(t.name, i) for t in request.topics for i in t.partition_indexes]
        if not wanted:
            return response_class(
                throttle_time_ms=0, error_code=NONE, error_message=None, topics=[]
            )
    try:
        ongoing = call.core.partition_moves.ongoing(call.caller, wanted)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0, error_code=_cluster_error(exc), error_message=str(exc), topics=[]
        )
    by_topic: dict[str, list[Any]] = {}
    for r in ongoing:
        by_topic.setdefault(r.topic, []).append(
            partition_class(
                partition_index=r.partition,
                replicas=list(r.replicas),
                adding_replicas=list(r.adding),
                removing_replicas=list(r.removing),
            )
        )
    topics = [topic_class(name=name, partitions=parts) for name, parts in sorted(by_topic.items())]
    return response_class(throttle_time_ms=0, error_code=NONE, error_message=None, topics=topics)


def elect_leaders(call: KafkaCall, request: Any) -> Any:
    response_class = ElectLeadersResponse[call.version]
    topic_class = response_class.ReplicaElectionResult
    partition_class = topic_class.PartitionResult
    kind: ElectionType = (
        "unclean" if getattr(request, "election_type", 0) == UNCLEAN else "preferred"
    )
    wanted = None
    if request.topic_partitions is not None:
        wanted = [(t.topic, i) for t in request.topic_partitions for i in t.partitions]
    try:
        results = call.core.partition_moves.elect(call.caller, kind, wanted)
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0, error_code=_cluster_error(exc), replica_election_results=[]
        )
    by_topic: dict[str, list[Any]] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(
            partition_class(
                partition_id=r.partition,
                error_code=NONE if r.error is None else kafka_error_code(r.error),
                error_message=None if r.error is None else str(r.error),
            )
        )
    results_out = [
        topic_class(topic=name, partition_result=parts) for name, parts in by_topic.items()
    ]
    return response_class(throttle_time_ms=0, error_code=NONE, replica_election_results=results_out)


def describe_log_dirs(call: KafkaCall, request: Any) -> Any:
    response_class = DescribeLogDirsResponse[call.version]
    result_class = response_class.DescribeLogDirsResult
    topic_class = result_class.DescribeLogDirsTopic
    partition_class = topic_class.DescribeLogDirsPartition
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, i) for t in request.topics for i in t.partitions}
    nodes = nodes_on_lane(call.core, call.identity.lane)
    if not nodes:  # no live node on this lane: nothing of this broker's to describe
        return response_class(throttle_time_ms=0, error_code=NONE, results=[])
    try:
        log_dirs = call.core.partition_moves.describe_log_dirs(call.caller, nodes)
    except SeglogError as exc:
        return response_class(throttle_time_ms=0, error_code=_cluster_error(exc), results=[])
    results = []
    for node in log_dirs:
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
        results.append(
            result_class(
                error_code=NONE if node.error is None else kafka_error_code(node.error),
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
