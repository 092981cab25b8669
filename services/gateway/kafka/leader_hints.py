"""The current leader of a partition as Kafka's clients see it, for the leader hints of
KIP-951: a Produce (v10+) or Fetch (v16+) answer that says NOT_LEADER_OR_FOLLOWER (or
FENCED_LEADER_EPOCH) for a partition carries its current leader (id and epoch) in a tagged
field, and the endpoints of those leaders in another, so the client moves to the new leader
without waiting for a metadata refresh.

What Kafka's broker fills in (KafkaApis.getCurrentLeader): the leader id and epoch its
metadata cache holds for the partition, (-1, -1) for one it does not know, the id -1 with the
epoch for a partition with no leader; and an endpoint for a leader only when that broker is
alive and has the request's listener (`getAliveBrokerNode`). The same here, with leaders as
Metadata presents them (brokers.py, metadata_apis.py): a partition's storage leader is the
broker of that id at its gateway lane (or, with the gateways' lanes as the brokers, the lane
Metadata names), with its endpoint; a partition Metadata answers without a leader (offline,
or its leader's node no longer live: LEADER_NOT_AVAILABLE, leader -1) is hinted as leader -1
at its epoch, with no endpoint, which the Java client ignores as incomplete.

What the Java client does with them (Sender.completeBatch, Metadata.updatePartitionLeadership,
Kafka 3.7+): it takes a hint only when both id and epoch are set, the epoch is newer than the
one it holds, and the id has an endpoint (in the answer's NodeEndpoints or already known);
else it ignores the hint and refreshes metadata as before. So a hint naming the leader whose
node just died, at the epoch the client has, changes nothing, and once the registry has
elected a successor (a new epoch) the next answer moves the client to it at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from seglog.errors import SeglogError

from .brokers import Broker, BrokerView, broker_view
from .node_lanes import ListenerSide

if TYPE_CHECKING:
    from .core import KafkaCore

NO_LEADER = -1
NO_EPOCH = -1


@dataclass(frozen=True)
class LeaderHint:
    leader_id: int
    leader_epoch: int


UNKNOWN = LeaderHint(NO_LEADER, NO_EPOCH)


class LeaderHints:
    """The hints of one answer: the current leader of each partition asked about, and the
    endpoints of the leaders named (each once). The broker view is read once per answer, and
    only when some partition needs a hint."""

    def __init__(self, core: KafkaCore, listener: ListenerSide | None = None) -> None:
        self._core = core
        self._listener = listener  # brokers are named as the client's listener names them
        self._view: BrokerView | None = None
        self._endpoints: dict[int, Broker] = {}

    def _broker_view(self) -> BrokerView:
        if self._view is None:
            self._view = broker_view(self._core, self._listener)
        return self._view

    def current_leader(self, topic: str, partition: int) -> LeaderHint:
        """The partition's leader and epoch as Metadata would name them now; its broker's
        endpoint is kept for `endpoints` when that broker is listed (alive)."""
        registry = self._core.registry
        known = registry.topics.get(topic)
        if known is None or not 0 <= partition < len(known.partitions):
            return UNKNOWN
        epoch = known.partitions[partition].leader_epoch
        try:
            route = registry.route(topic, partition)
        except SeglogError:  # no leader, or offline on its node: Metadata names none
            return LeaderHint(NO_LEADER, epoch)
        view = self._broker_view()
        leader_id = view.leader(topic, partition, route.leader)
        broker = next((b for b in view.brokers if b.node_id == leader_id), None)
        if broker is None or not route.live:
            # Its node's session lapsed: Metadata answers LEADER_NOT_AVAILABLE, leader -1.
            return LeaderHint(NO_LEADER, epoch)
        self._endpoints[leader_id] = broker
        return LeaderHint(leader_id, epoch)

    def endpoints(self) -> list[Broker]:
        """The listed brokers among the leaders `current_leader` named, by id."""
        return [self._endpoints[node_id] for node_id in sorted(self._endpoints)]
