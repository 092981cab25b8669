"""Where a Fetch answer sends a client whose partition is not led here (KIP-951): on a
NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH partition Kafka's broker fills the tagged
`current_leader` (v12+) with the leader and leader epoch its metadata holds, and from v16 lists
that leader's address in `node_endpoints`, so the client moves without a Metadata round trip.

The leader is named as Metadata names it (brokers.py: the storage leader's node id at its lane
on the client's listener, or the gateway's own id when no node is live), with the registry's
leader epoch. A leader no listed broker stands for (its node is down) is named
without an endpoint, as Kafka's broker names a leader its metadata has but that is not alive;
a partition without a leader answers -1.
"""

from __future__ import annotations

from typing import Any

from kafka import errors as kafka_errors

from .brokers import Broker, BrokerView, broker_view
from .error_table import NOT_LEADER_OR_FOLLOWER
from .kafka_call import KafkaCall

FENCED_LEADER_EPOCH: int = kafka_errors.FencedLeaderEpochError.errno
FIRST_CURRENT_LEADER_VERSION = 12
FIRST_NODE_ENDPOINTS_VERSION = 16
NO_LEADER = -1
MOVED = frozenset({NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH})


class LeaderHints:
    """The current leaders one answer names, and their endpoints (the broker view read once
    per answer, only when a partition needs it)."""

    def __init__(self, call: KafkaCall) -> None:
        self.call = call
        self._view: BrokerView | None = None
        self.endpoints: dict[int, Broker] = {}

    def current_leader(self, partition_class: Any, topic: str, partition: int, error: int) -> Any:
        """The `current_leader` of a partition answered `error` (None: the field's default,
        not written)."""
        if error not in MOVED or self.call.version < FIRST_CURRENT_LEADER_VERSION or not topic:
            return None
        leader, epoch = NO_LEADER, NO_LEADER
        found = self.call.core.registry.topics.get(topic)
        if found is not None and 0 <= partition < len(found.partitions):
            assignment = found.partitions[partition]
            epoch = assignment.leader_epoch
            if assignment.leader >= 0:
                if self._view is None:
                    self._view = broker_view(self.call.core, self.call.listener)
                leader = self._view.leader(topic, partition, assignment.leader)
                for broker in self._view.brokers:
                    if broker.node_id == leader:
                        self.endpoints[leader] = broker
        return partition_class.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)

    def node_endpoints(self, response_class: Any) -> list[Any]:
        if self.call.version < FIRST_NODE_ENDPOINTS_VERSION:
            return []
        return [
            response_class.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in self.endpoints.values()
        ]
