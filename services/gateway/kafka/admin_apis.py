"""Kafka's topic and cluster administration over the core's TopicAdmin (cluster/
topic_admin.py, which authorizes the call's caller and validates as for every caller):
CreateTopics 2-7,
DeleteTopics 1-6, CreatePartitions 0-3, DeleteRecords 0-2 and DescribeCluster 0-2; the
config APIs are config_apis.py's.

Each topic is its own call, so one refused or invalid topic answers its own error and the
others go on, as in Kafka; a topic named twice in one request gets INVALID_REQUEST. seglog
places replicas itself: a request with explicit replica assignments gets INVALID_REQUEST
saying so. CreateTopics answers the created topic's id (v7+, the zero id for a validation);
DeleteTopics 6 deletes by id when an entry has no name (UNKNOWN_TOPIC_ID for an id no topic
has; INVALID_REQUEST for both, as Kafka) and answers each deleted topic's id.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka import errors as kafka_errors
from kafka.protocol.admin import (
    ACLOperation,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
)

from seglog.errors import InvalidRequestError, SeglogError
from seglog.security.acls import CLUSTER_NAME
from seglog.storage.config import described_configs

from ..cluster.topic_admin import NewTopic, TopicOutcome
from ..routing.record_deletion import RecordsBefore
from . import config_apis, topic_ids
from .brokers import cluster_id, described_brokers
from .error_codes import NONE, kafka_error_code

if TYPE_CHECKING:
    from .api_table import ApiTable
    from .kafka_call import KafkaCall

NO_TOPIC_ID = uuid.UUID(int=0)
# DescribeCluster's endpoint types (1+) and Kafka's answers for the ones a broker is not.
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
MISMATCHED_ENDPOINT_TYPE = kafka_errors.MismatchedEndpointTypeError.errno
UNSUPPORTED_ENDPOINT_TYPE = kafka_errors.UnsupportedEndpointTypeError.errno
MAX_SPAN_TOPICS = 16  # topics named on a request's span, as the data path's APIs do
# The operations Kafka authorizes on the cluster resource (DescribeCluster's bit set).
CLUSTER_OPERATIONS = {
    ACLOperation.ALTER: "Alter",
    ACLOperation.ALTER_CONFIGS: "AlterConfigs",
    ACLOperation.CLUSTER_ACTION: "ClusterAction",
    ACLOperation.CREATE: "Create",
    ACLOperation.DESCRIBE: "Describe",
    ACLOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    ACLOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
}


def register(table: ApiTable) -> None:
    table.register(CreateTopicsRequest, 2, 7, create_topics)
    table.register(DeleteTopicsRequest, 1, 6, delete_topics)
    table.register(CreatePartitionsRequest, 0, 3, create_partitions)
    table.register(DeleteRecordsRequest, 0, 2, delete_records)
    table.register(DescribeClusterRequest, 0, 2, describe_cluster)


def _each_topic(
    call: KafkaCall, names: list[str], act: Callable[[int], None]
) -> list[tuple[int, str | None]]:
    """`act(i)` for each topic named once, its error as (Kafka code, message); a name given
    twice answers INVALID_REQUEST without acting."""
    call.attributes["kafka.topics"] = ",".join(dict.fromkeys(names[:MAX_SPAN_TOPICS]))
    counts = Counter(names)
    out: list[tuple[int, str | None]] = []
    for i, name in enumerate(names):
        try:
            if counts[name] > 1:
                raise InvalidRequestError(f"topic {name!r} is named more than once")
            act(i)
            out.append((0, None))
        except SeglogError as exc:
            out.append((kafka_error_code(exc), str(exc)))
    return out


def _raise_outcome(outcome: TopicOutcome) -> None:
    if outcome.error is not None:
        raise outcome.error


# -- CreateTopics --------------------------------------------------------------------------


def create_topics(call: KafkaCall, request: Any) -> Any:
    topics = request.topics
    admin = call.core.topics

    def create(i: int) -> None:
        topic = topics[i]
        if topic.assignments:
            raise InvalidRequestError(
                f"topic {topic.name!r}: seglog places replicas itself; give num_partitions "
                "and replication_factor, not replica assignments"
            )
        new = NewTopic(
            topic.name,
            topic.num_partitions,
            topic.replication_factor,
            {c.name: c.value for c in topic.configs if c.value is not None},
        )
        (outcome,) = admin.create_topics(call.caller, [new], validate_only=request.validate_only)
        _raise_outcome(outcome)

    outcomes = _each_topic(call, [t.name for t in topics], create)
    results = [
        _created(call, topic, code, message, request.validate_only)
        for topic, (code, message) in zip(topics, outcomes, strict=True)
    ]
    return CreateTopicsResponse[call.version](throttle_time_ms=0, topics=results)


def _created(call: KafkaCall, topic: Any, code: int, message: str | None, dry: bool) -> Any:
    """A topic's result; on success (v5+) with its partitions, replicas and configs."""
    result_class = CreateTopicsResponse.CreatableTopicResult
    result = result_class(
        name=topic.name,
        topic_id=NO_TOPIC_ID,
        error_code=code,
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )
    if code or call.version < 5:
        return result
    registry = call.core.registry
    overrides = {c.name: c.value for c in topic.configs if c.value is not None}
    if dry:
        result.num_partitions = (
            topic.num_partitions if topic.num_partitions > 0 else registry.limits.num_partitions
        )
        result.replication_factor = (
            topic.replication_factor
            if topic.replication_factor > 0
            else registry.limits.default_replication_factor
        )
    else:
        try:
            created = registry.topic(topic.name)
        except SeglogError:  # deleted again since: created all the same, nothing to show
            return result
        result.num_partitions = len(created.partitions)
        result.replication_factor = created.replication_factor
        result.topic_id = topic_ids.to_wire(created.topic_id)
    try:
        described = _described_configs(call, topic.name, overrides, dry)
    except SeglogError as exc:  # not allowed to see them: the topic was created all the same
        result.topic_config_error_code = kafka_error_code(exc)
        return result
    config_class = result_class.CreatableTopicConfigs
    result.configs = [
        config_class(
            name=name,
            value=value,
            read_only=False,
            config_source=config_apis.CONFIG_SOURCES.get(source, 0),
            is_sensitive=False,
        )
        for name, value, source in described
    ]
    return result


def _described_configs(
    call: KafkaCall, name: str, overrides: dict[str, str], dry: bool
) -> list[tuple[str, str, str]]:
    """A created topic's configs as DescribeConfigs answers them (needing DescribeConfigs on
    it); for a validation, what its overrides over Kafka's defaults would give."""
    if dry:
        call.core.authorization.check(
            call.caller, [("DescribeConfigs", "topic", name)], "CreateTopics"
        )
        return described_configs({}, overrides)
    (answered,) = call.core.topics.describe_configs(call.caller, [name])
    if isinstance(answered, SeglogError):
        raise answered
    return answered


# -- DeleteTopics ------------------------------------------------------------------------


def delete_topics(call: KafkaCall, request: Any) -> Any:
    admin = call.core.topics
    if call.version >= 6:
        entries = [(t.name, t.topic_id) for t in request.topics]
    else:
        entries = [(name, NO_TOPIC_ID) for name in request.topic_names]

    def delete(i: int) -> None:
        name, topic_id = entries[i]
        registry = call.core.registry
        if name is None:  # by id: the registry's name, UNKNOWN_TOPIC_ID for none
            name = registry.topic_name_of(topic_ids.from_wire(topic_id))
        elif topic_ids.from_wire(topic_id):  # Kafka's answer to both
            raise InvalidRequestError("give a topic's name or its id, not both")
        elif name in registry.topics:
            topic_id = topic_ids.to_wire(registry.topic_id_of(name))
        (outcome,) = admin.delete_topics(call.caller, [name])
        _raise_outcome(outcome)
        entries[i] = (name, topic_id)

    outcomes = _each_topic(call, [name or str(topic_id) for name, topic_id in entries], delete)
    result_class = DeleteTopicsResponse.DeletableTopicResult
    results = [
        result_class(name=name, topic_id=topic_id, error_code=code, error_message=message)
        for (name, topic_id), (code, message) in zip(entries, outcomes, strict=True)
    ]
    return DeleteTopicsResponse[call.version](throttle_time_ms=0, responses=results)


# -- CreatePartitions --------------------------------------------------------------------


def create_partitions(call: KafkaCall, request: Any) -> Any:
    admin = call.core.topics
    topics = request.topics

    def grow(i: int) -> None:
        topic = topics[i]
        if topic.assignments is not None:
            raise InvalidRequestError(
                f"topic {topic.name!r}: seglog places new partitions' replicas itself; "
                "leave assignments null"
            )
        (outcome,) = admin.create_partitions(
            call.caller, [(topic.name, topic.count)], validate_only=request.validate_only
        )
        _raise_outcome(outcome)

    outcomes = _each_topic(call, [t.name for t in topics], grow)
    result_class = CreatePartitionsResponse.CreatePartitionsTopicResult
    results = [
        result_class(name=topic.name, error_code=code, error_message=message)
        for topic, (code, message) in zip(topics, outcomes, strict=True)
    ]
    return CreatePartitionsResponse[call.version](throttle_time_ms=0, results=results)


# -- DeleteRecords -----------------------------------------------------------------------


def delete_records(call: KafkaCall, request: Any) -> Any:
    """Each topic on its own (Delete on it), routed by the core to each partition's leader;
    the low watermark answered is the leader's new log start offset."""
    deletion = call.core.record_deletion
    topic_class = DeleteRecordsResponse.DeleteRecordsTopicResult
    partition_class = topic_class.DeleteRecordsPartitionResult
    names = [t.name for t in request.topics[:MAX_SPAN_TOPICS]]
    call.attributes["kafka.topics"] = ",".join(dict.fromkeys(names))
    results = []
    for topic in request.topics:
        wanted = [RecordsBefore(topic.name, p.partition_index, p.offset) for p in topic.partitions]
        try:
            partitions = [
                partition_class(
                    partition_index=done.partition,
                    low_watermark=done.low_watermark,
                    error_code=NONE if done.error is None else kafka_error_code(done.error),
                )
                for done in deletion.delete_records(call.caller, wanted)
            ]
        except SeglogError as exc:
            partitions = [
                partition_class(
                    partition_index=p.partition_index,
                    low_watermark=-1,
                    error_code=kafka_error_code(exc),
                )
                for p in topic.partitions
            ]
        results.append(topic_class(name=topic.name, partitions=partitions))
    return DeleteRecordsResponse[call.version](throttle_time_ms=0, topics=results)


# -- DescribeCluster ---------------------------------------------------------------------


def describe_cluster(call: KafkaCall, request: Any) -> Any:
    """The live storage nodes that are not decommissioned as the brokers (brokers.py), and
    with `include_fenced_brokers` (v2) every node with a lane, those down or decommissioned
    with `is_fenced`, as Kafka's broker answers from its registrations. As Kafka's broker,
    anyone may ask (Metadata tells as much); the cluster's authorized operations, when asked
    for, need Describe on the cluster (else none)."""
    response_class = DescribeClusterResponse[call.version]
    endpoint_type = request.endpoint_type if call.version >= 1 else BROKER_ENDPOINT
    if endpoint_type != BROKER_ENDPOINT:
        # Kafka's codes: a controller endpoint asked of a broker, or no endpoint type at all.
        code = (
            MISMATCHED_ENDPOINT_TYPE
            if endpoint_type == CONTROLLER_ENDPOINT
            else (UNSUPPORTED_ENDPOINT_TYPE)
        )
        return response_class(
            throttle_time_ms=0,
            error_code=code,
            error_message=f"endpoint type {endpoint_type}: this gateway answers as a broker (1)",
            cluster_id=cluster_id(call.core),
            controller_id=-1,
            brokers=[],
            authorized_operations=None,
        )
    operations = None
    if request.include_cluster_authorized_operations:
        operations = set()
        if call.allowed("Describe", "cluster", CLUSTER_NAME):
            operations = {
                int(code)
                for code, name in CLUSTER_OPERATIONS.items()
                if call.allowed(name, "cluster", CLUSTER_NAME)
            }
    include_fenced = call.version >= 2 and bool(request.include_fenced_brokers)
    view = described_brokers(call.core, call.listener, include_fenced)
    broker_class = DescribeClusterResponse.DescribeClusterBroker
    return response_class(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        cluster_id=cluster_id(call.core),
        controller_id=view.controller_id,
        brokers=[
            broker_class(
                broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack, is_fenced=b.fenced
            )
            for b in view.brokers
        ],
        authorized_operations=operations,
    )
