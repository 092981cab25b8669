"""Metadata 0–12: the live storage nodes as the brokers, each at a gateway lane of its own that
relays to it (brokers.py says why, at which port, and when the gateway itself is listed
instead), each partition led by its storage leader, with the real leader epoch and the real
replica and ISR node ids.

A partition whose storage leader is offline (no live replica in its ISR, or its leader's node
is down or has the partition offline) answers LEADER_NOT_AVAILABLE with leader -1, as Kafka
does; clients retry it. A named topic that does not exist goes to the core's auto-creation
(cluster/auto_create.py: v0-3 always allow it, v4+ as allow_auto_topic_creation says): made
now, it answers LEADER_NOT_AVAILABLE, as Kafka's broker answers a topic it has just made
(the answer is sent once the topic's nodes have been told, later.py: no request handler waits
for them); else INVALID_TOPIC_EXCEPTION for an illegal name, TOPIC_AUTHORIZATION_FAILED
without Create, UNKNOWN_TOPIC_OR_PARTITION. A topic the principal may not Describe answers
TOPIC_AUTHORIZATION_FAILED when named and is left out when all topics are asked for, as
Kafka's broker does.

Topic ids (KIP-516, v10+): every topic answers its id. v12 may name a topic by id instead of
name (the id wins when both are given); an id no topic has answers UNKNOWN_TOPIC_ID with a
null name, one the principal may not Describe TOPIC_AUTHORIZATION_FAILED with a null name
(Kafka's broker: ids are not secret, names are). v10 and v11 take names only, as Kafka's
broker: an id there, or a null name, is INVALID_REQUEST for the whole request. Topics named
by id are never auto-created (an unknown id has no name to create).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from seglog.errors import InvalidRequestError, SeglogError, UnknownTopicIdError

from ..cluster.registry import Topic
from .api_table import ApiTable
from .brokers import BrokerView, broker_view, cluster_id
from .error_codes import (
    INVALID_REQUEST,
    LEADER_NOT_AVAILABLE,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    kafka_error_code,
)
from .kafka_call import KafkaCall
from .later import answer_later
from .topic_ids import ZERO, from_wire, to_wire

NO_LEADER = -1
FIRST_BY_ID_VERSION = 12  # topics named by id in requests


def _partitions(call: KafkaCall, response_class: Any, topic: Topic, view: BrokerView) -> list[Any]:
    registry = call.core.registry
    partitions = []
    topic_class = response_class.MetadataResponseTopic
    live: dict[int, bool] = {}  # is_live takes the registry's lock: once per node
    listed = view.ids
    for index, assignment in enumerate(topic.partitions):
        error, leader = NONE, NO_LEADER
        try:
            route = registry.route(topic.name, index)
            leader = view.leader(topic.name, index, route.leader)
            if not route.live or leader not in listed:
                error, leader = LEADER_NOT_AVAILABLE, NO_LEADER
        except SeglogError as exc:
            error, leader = kafka_error_code(exc), NO_LEADER
            if error == NONE:
                error = LEADER_NOT_AVAILABLE
        partitions.append(
            topic_class.MetadataResponsePartition(
                error_code=error,
                partition_index=index,
                leader_id=leader,
                leader_epoch=assignment.leader_epoch,
                replica_nodes=list(assignment.replicas),
                isr_nodes=list(assignment.isr),
                offline_replicas=[
                    r for r in assignment.replicas if not live.setdefault(r, registry.is_live(r))
                ],
            )
        )
    return partitions


def _topic(
    call: KafkaCall,
    response_class: Any,
    name: str,
    view: BrokerView,
    *,
    named: bool,
    missing: dict[str, SeglogError | None],
    by_id: bool = False,
) -> Any | None:
    topic_class = response_class.MetadataResponseTopic
    topic = call.core.registry.topics.get(name)
    topic_id = to_wire(topic.topic_id) if topic is not None else ZERO
    if not call.allowed("Describe", "topic", name):
        if not named:
            return None
        return topic_class(
            error_code=TOPIC_AUTHORIZATION_FAILED,
            name=None if by_id else name,
            topic_id=topic_id if by_id else ZERO,
            partitions=[],
        )
    refused = missing.get(name)
    if refused is not None:
        return topic_class(error_code=kafka_error_code(refused), name=name, partitions=[])
    if topic is None or name in missing:  # just made: Kafka answers its clients retry this
        code = UNKNOWN_TOPIC_OR_PARTITION if topic is None else LEADER_NOT_AVAILABLE
        return topic_class(error_code=code, name=name, topic_id=topic_id, partitions=[])
    return topic_class(
        error_code=NONE,
        name=name,
        topic_id=topic_id,
        is_internal=topic.internal,
        partitions=_partitions(call, response_class, topic, view),
    )


def _named(call: KafkaCall, request: Any) -> list[tuple[str, Any]]:
    """The request's topics, each as (name, id asked for or None): by id (v12+) the name
    is the registry's, "" when no topic has the id."""
    named: list[tuple[str, Any]] = []
    for t in request.topics:
        topic_id = from_wire(getattr(t, "topic_id", None))
        if call.version < FIRST_BY_ID_VERSION and (topic_id or t.name is None):
            raise InvalidRequestError(
                f"Metadata v{call.version} names topics by name only (ids from v12)"
            )
        if topic_id:
            try:
                named.append((call.core.registry.topic_name_of(topic_id), t.topic_id))
            except UnknownTopicIdError:
                named.append(("", t.topic_id))
        elif t.name is not None:
            named.append((t.name, None))
    return list(dict.fromkeys(named))


def metadata(call: KafkaCall, request: Any) -> Any:
    response_class = MetadataResponse[call.version]
    # v0: an empty list means every topic; v1+: null does, and an empty list none.
    every_topic = request.topics is None or (call.version == 0 and not request.topics)
    if every_topic:
        asked: list[tuple[str, Any]] = [(n, None) for n in sorted(call.core.registry.topics)]
    else:
        try:
            asked = _named(call, request)
        except InvalidRequestError:  # Kafka's getErrorResponse: every topic answers the code
            return _refused(call, response_class, request)
    names = [name for name, _ in asked]
    call.attributes["kafka.topics"] = ",".join(names[:16]) if not every_topic else "*"
    if every_topic:
        return _answer(call, response_class, asked, every_topic, {})
    # Answered once the topics it makes are on their nodes, holding no handler meanwhile.
    creating = call.core.auto_create.start_missing(
        call.caller,
        [n for n, by_id in asked if by_id is None and call.allowed("Describe", "topic", n)],
        allowed=call.version < 4 or bool(request.allow_auto_topic_creation),
    )
    return answer_later(
        creating, lambda missing: _answer(call, response_class, asked, every_topic, missing)
    )


def _answer(
    call: KafkaCall,
    response_class: Any,
    asked: list[tuple[str, Any]],
    every_topic: bool,
    missing: dict[str, SeglogError | None],
) -> Any:
    view = broker_view(call.core, call.listener)
    topics = [
        _topic(
            call,
            response_class,
            name,
            view,
            named=not every_topic,
            missing=missing,
            by_id=wire_id is not None,
        )
        if name or wire_id is None
        else response_class.MetadataResponseTopic(
            error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=wire_id, partitions=[]
        )
        for name, wire_id in asked
    ]
    return response_class(
        throttle_time_ms=0,
        brokers=[
            response_class.MetadataResponseBroker(
                node_id=b.node_id, host=b.host, port=b.port, rack=b.rack
            )
            for b in view.brokers
        ],
        cluster_id=cluster_id(call.core),
        controller_id=view.controller_id,
        topics=[t for t in topics if t is not None],
    )


def _refused(call: KafkaCall, response_class: Any, request: Any) -> Any:
    topic_class = response_class.MetadataResponseTopic
    return response_class(
        throttle_time_ms=0,
        brokers=[],
        cluster_id=cluster_id(call.core),
        controller_id=broker_view(call.core).controller_id,
        topics=[
            topic_class(error_code=INVALID_REQUEST, name=t.name, topic_id=t.topic_id, partitions=[])
            for t in request.topics
        ],
    )


def register(table: ApiTable) -> None:
    table.register(MetadataRequest, 0, 12, metadata)
