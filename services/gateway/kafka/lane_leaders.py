"""A produce that comes in on a storage node's lane for a partition that node does not lead
is answered NOT_LEADER_OR_FOLLOWER, as that broker would answer it, rather than relayed to
the leader (brokers.py: any lane can reach any node).

Why: a Kafka producer pipelines its produce requests to a leader (up to five in flight) and
takes a leader change from the first NOT_LEADER answer. Relayed, the first of two pipelined
produces could be answered NOT_LEADER by the old leader while the second, routed after the
change, reached the new one and was answered OUT_OF_ORDER_SEQUENCE_NUMBER, its sequence
following the failed one. librdkafka then bumps its idempotent epoch and sends again from
sequence 0 all it has not had acknowledged, a batch already written among them (librdkafka
issue 4953): a duplicate no broker can remove, seen in the Streams fault campaign. Kafka's
old leader answers NOT_LEADER to both, and the client sends both again, in order, to the new
leader.

A connection to the listener's own port when it is no node's (NO_NODE: the gateway as the
broker) is relayed as before. The check reads the registry's routes (no lock, no call), once
per partition of the request. Left to the data plane, which answers as before: a topic the
caller may not write (Kafka answers TOPIC_AUTHORIZATION_FAILED before it looks at leaders,
and NOT_LEADER would tell the caller the topic exists), and a partition whose route cannot be
read (unknown, offline).
"""

from __future__ import annotations

from seglog.errors import NotLeaderError, SeglogError

from ..authorization import Authorization
from ..broker.caller import Caller
from ..cluster.registry import Registry
from ..routing.data_plane import TopicProduce
from .node_lanes import NO_NODE


def misdirected(
    registry: Registry,
    authorization: Authorization,
    caller: Caller,
    lane: int,
    topics: list[TopicProduce],
) -> dict[tuple[str, int], SeglogError]:
    """The partitions of `topics` the caller may write whose leader is known and is not node
    `lane`."""
    if lane == NO_NODE:
        return {}
    refused: dict[tuple[str, int], SeglogError] = {}
    for topic in topics:
        if not authorization.allows(caller, "Write", "topic", topic.topic):
            continue
        for records in topic.partitions:
            try:
                leader = registry.route(topic.topic, records.partition).leader
            except SeglogError:
                continue
            if leader != lane:
                refused[(topic.topic, records.partition)] = NotLeaderError(
                    f"{topic.topic}-{records.partition} is led by broker {leader}, "
                    f"not by broker {lane}, which this connection is to"
                )
    return refused
