"""The leader hints of a Fetch answer (KIP-951), as leader_hints.py works them out for
Produce too: on a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH partition the tagged
`current_leader` (v12+) names the leader and epoch, and from v16 `node_endpoints` lists that
leader's address, so the client moves without a Metadata round trip. This module only says
which answers carry them and builds the codec's classes.
"""

from __future__ import annotations

from typing import Any

from kafka import errors as kafka_errors

from .error_table import NOT_LEADER_OR_FOLLOWER
from .kafka_call import KafkaCall
from .leader_hints import LeaderHints

FENCED_LEADER_EPOCH: int = kafka_errors.FencedLeaderEpochError.errno
FIRST_CURRENT_LEADER_VERSION = 12
FIRST_NODE_ENDPOINTS_VERSION = 16
MOVED = frozenset({NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH})


class FetchLeaderHints:
    """The current leaders one Fetch answer names, and their endpoints."""

    def __init__(self, call: KafkaCall) -> None:
        self.version = call.version
        self.hints = LeaderHints(call.core, call.listener)

    def current_leader(self, partition_class: Any, topic: str, partition: int, error: int) -> Any:
        """The `current_leader` of a partition answered `error` (None: the field's default,
        not written)."""
        if error not in MOVED or self.version < FIRST_CURRENT_LEADER_VERSION or not topic:
            return None
        hint = self.hints.current_leader(topic, partition)
        return partition_class.LeaderIdAndEpoch(
            leader_id=hint.leader_id, leader_epoch=hint.leader_epoch
        )

    def node_endpoints(self, response_class: Any) -> list[Any]:
        if self.version < FIRST_NODE_ENDPOINTS_VERSION:
            return []
        return [
            response_class.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in self.hints.endpoints()
        ]
