"""Metadata 0–9: the live storage nodes as the brokers, each at a gateway lane of its own that
relays to it (brokers.py says why, which lane, and when the gateways' lanes are listed
instead), each partition led by its storage leader, with the real leader epoch and the real
replica and ISR node ids.

A partition whose storage leader is offline (no live replica in its ISR, or its leader's node
is down or has the partition offline) answers LEADER_NOT_AVAILABLE with leader -1, as Kafka
does; clients retry it. A named topic that does not exist goes to the core's auto-creation
(cluster/auto_create.py: v0-3 always allow it, v4+ as allow_auto_topic_creation says): made
now, it answers LEADER_NOT_AVAILABLE, as Kafka's broker answers a topic it has just made;
else INVALID_TOPIC_EXCEPTION for an illegal name, TOPIC_AUTHORIZATION_FAILED without Create,
UNKNOWN_TOPIC_OR_PARTITION. A topic the principal may not Describe answers
TOPIC_AUTHORIZATION_FAILED when named and is left out when all topics are asked for, as
Kafka's broker does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from seglog.errors import SeglogError

from ..cluster.registry import Topic
from .api_table import ApiTable
from .brokers import BrokerView, broker_view, cluster_id
from .error_codes import (
    LEADER_NOT_AVAILABLE,
    NONE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    kafka_error_code,
)
from .kafka_call import KafkaCall

if TYPE_CHECKING:
    from ..server import Gateway

NO_LEADER = -1


def _partitions(call: KafkaCall, response_class: Any, topic: Topic, view: BrokerView) -> list[Any]:
    registry = call.gateway.registry
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
) -> Any | None:
    topic_class = response_class.MetadataResponseTopic
    if not call.allowed("Describe", "topic", name):
        if not named:
            return None
        return topic_class(error_code=TOPIC_AUTHORIZATION_FAILED, name=name, partitions=[])
    topic = call.gateway.registry.topics.get(name)
    refused = missing.get(name)
    if refused is not None:
        return topic_class(error_code=kafka_error_code(refused), name=name, partitions=[])
    if topic is None or name in missing:  # just made: Kafka answers its clients retry this
        code = UNKNOWN_TOPIC_OR_PARTITION if topic is None else LEADER_NOT_AVAILABLE
        return topic_class(error_code=code, name=name, partitions=[])
    return topic_class(
        error_code=NONE,
        name=name,
        is_internal=topic.internal,
        partitions=_partitions(call, response_class, topic, view),
    )


def metadata(call: KafkaCall, request: Any) -> Any:
    response_class = MetadataResponse[call.version]
    # v0: an empty list means every topic; v1+: null does, and an empty list none.
    every_topic = request.topics is None or (call.version == 0 and not request.topics)
    if every_topic:
        names = sorted(call.gateway.registry.topics)
    else:
        names = list(dict.fromkeys(t.name for t in request.topics if t.name is not None))
    call.attributes["kafka.topics"] = ",".join(names[:16]) if not every_topic else "*"
    view = broker_view(call.gateway, call.advertised_address)
    missing = {}
    if not every_topic:
        missing = call.gateway.auto_create.create_missing(
            call.caller,
            [n for n in names if call.allowed("Describe", "topic", n)],
            allowed=call.version < 4 or bool(request.allow_auto_topic_creation),
        )
    topics = [
        _topic(call, response_class, name, view, named=not every_topic, missing=missing)
        for name in names
    ]
    return response_class(
        throttle_time_ms=0,
        brokers=[
            response_class.MetadataResponseBroker(
                node_id=b.node_id, host=b.host, port=b.port, rack=b.rack
            )
            for b in view.brokers
        ],
        cluster_id=cluster_id(call.gateway),
        controller_id=view.controller_id,
        topics=[t for t in topics if t is not None],
    )


def register(table: ApiTable, gateway: Gateway) -> None:
    table.register(MetadataRequest, 0, 9, metadata)
