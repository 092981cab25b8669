"""What the registry knows of a storage node beyond the metadata log: its session (liveness
from heartbeats or an etcd lease, fencing, controlled shutdown, what it reports it cannot
serve) and the metadata offset it has received; and the view of its partitions it is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .metadata_image import Topic
from .partition_changes import PartitionAssignment, PartitionChange


@dataclass
class Node:
    node_id: int
    address: str
    last_heartbeat: float | None = None  # time.monotonic() of the last heartbeat
    grace_until: float = 0.0
    heard_from: bool = False
    # Partitions the node reported it cannot serve, with its reason (from its heartbeats).
    offline: dict[tuple[str, int], str] = field(default_factory=dict)
    # Its own topic defaults (--config log.*), Kafka's names, from its heartbeats.
    log_config_defaults: dict[str, str] = field(default_factory=dict)
    bulk_address: str = ""  # its bulk fetch listener, from its heartbeats ("" when none)
    fenced: bool = False  # its session expired: out of every ISR, leads nothing
    shutting_down: bool = False  # asked for a controlled shutdown
    session_lease: int = 0  # its etcd session's lease (node_sessions.py), 0 without etcd
    # The metadata offset the node last said it had received (its heartbeats), or a push
    # it acknowledged: the offset the next push's delta starts from.
    metadata_offset: int = 0


@dataclass
class NodeView:
    """What a node is told: the states of its partitions changed after its offset (all of
    them with `full`), those no longer assigned to it, and the offset this brings it to."""

    offset: int
    full: bool
    partitions: list[tuple[Topic, int, PartitionAssignment]]
    removed: list[PartitionChange]
