"""Routes for the data plane: the leader of a partition and how to reach it, read for every
partition of every Produce and Fetch. Nothing here takes the registry's lock, which
control-plane writes hold while they fsync or call etcd: routing reads the current image and
node objects as they are (RegistryState keeps them; the registry holds this part as
`routes`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from seglog.errors import (
    LeaderNotAvailableError,
    StorageError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

from .metadata_image import Topic
from .node_state import Node
from .partition_changes import NO_LEADER
from .registry_state import RegistryState


@dataclass(frozen=True)
class Route:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    address: str | None
    live: bool
    bulk_address: str = ""


class RegistryRoutes:
    def __init__(self, state: RegistryState) -> None:
        self._state = state
        # Never replaced (only the image is): kept here so a route reads one attribute less.
        self._nodes = state.nodes
        self._sessions = state.sessions
        self._session_timeout_s = state.session_timeout_s

    def topic(self, name: str) -> Topic:
        topic = self._state.image.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return topic

    def topic_by_id(self, topic_id: str) -> Topic:
        """The topic with that id (KIP-516), read as `route` reads: without a lock."""
        topic = self._state.image.topics.get(self._state.image.topic_name_of(topic_id))
        if topic is None or topic.topic_id != topic_id:
            raise UnknownTopicIdError(f"no topic has the id {topic_id!r}")
        return topic

    def topic_name_of(self, topic_id: str) -> str:
        """The name of the topic with that id; UNKNOWN_TOPIC_ID when none has it."""
        return self.topic_by_id(topic_id).name

    def topic_id_of(self, name: str) -> str:
        """The id of the named topic; UNKNOWN_TOPIC_OR_PARTITION when there is none."""
        return self.topic(name).topic_id

    def route(self, topic_name: str, partition: int) -> Route:
        """Run for every partition of every Produce and Fetch, so it takes no lock a
        control-plane write holds (writes keep the registry's lock while they fsync or call
        etcd): it reads the current objects as they are. Applying a batch swaps in new
        registration objects; a route read in the middle of a batch may pair the new
        leader with the old address, and the node it names then answers NOT_LEADER, which
        clients retry as they do for any leader change."""
        topic = self._state.image.topics.get(topic_name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {topic_name!r} does not exist")
        partitions = topic.partitions
        if not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartitionError(
                f"{topic_name} has partitions 0..{len(partitions) - 1}, not {partition}"
            )
        p = partitions[partition]
        leader = p.leader
        if leader == NO_LEADER:
            raise LeaderNotAvailableError(
                f"{topic_name}-{partition} is offline: no replica of its ISR {p.isr} is "
                f"live (unclean leader election is off)"
            )
        node = self._nodes.get(leader)
        reason = None if node is None else node.offline.get((topic_name, partition))
        if reason is not None:
            raise StorageError(f"{topic_name}-{partition} is offline on node {leader}: {reason}")
        return Route(
            topic_name,
            partition,
            leader,
            p.leader_epoch,
            node.address if node else None,
            self._routable(leader, node),
            node.bulk_address if node else "",
        )

    def bulk_routes(self) -> dict[int, str]:
        """The bulk listener of each node routable now, read as `route` reads (no lock):
        where Gateway.ProduceGrants sends producers."""
        return {
            node_id: node.bulk_address
            for node_id, node in list(self._nodes.items())
            if node.bulk_address and self._routable(node_id, node)
        }

    def _routable(self, node_id: int, node: Node | None) -> bool:
        """`is_live` as routing reads it: without the registry's lock, and never acting on
        what it reads (ending a lapsed etcd session is the control plane's to do)."""
        if self._sessions is not None:
            return self._sessions.has_session(node_id)
        if node is None:
            return False
        now = time.monotonic()
        last = node.last_heartbeat
        if last is not None and now - last < self._session_timeout_s:
            return True
        return not node.heard_from and now < node.grace_until
