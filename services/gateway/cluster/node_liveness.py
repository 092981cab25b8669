"""Which storage nodes are live, as the registry's decisions see them: each node's session
state in its `Node` (node_state.py), kept from the metadata log's node records and the
sessions, and the reads made of it (`is_live`, `live_nodes`, `eligible`).

Liveness is not in the log. With the file, a node is live while its last heartbeat to this
gateway is younger than the session timeout; after a gateway start every known node gets one
session timeout of grace, so routing works at once and a node that stays silent is declared
down after that. With etcd, a node is live while its session lease lives
(node_sessions.py), whichever gateway it heartbeats to.

The registry state holds one of these over its own `nodes` dict and lock (the same objects:
a heartbeat or a session change is seen by every reader of either at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping

from ..coordination.node_sessions import EtcdNodeSessions, NodeSession
from .node_state import Node


class NodeLiveness:
    def __init__(
        self,
        nodes: dict[int, Node],
        lock: threading.RLock,
        *,
        session_timeout_s: float,
        sessions: EtcdNodeSessions | None,
    ) -> None:
        self.nodes = nodes
        self._lock = lock
        self.session_timeout_s = session_timeout_s
        # Node sessions as etcd leases (several gateways), else heartbeats to this one.
        self.sessions = sessions

    def recorded(self, node_ids: Iterable[int], addresses: Mapping[int, str]) -> None:
        """Nodes the metadata log now records (call with the lock held): a new one gets a
        session timeout of grace and its etcd session if it has one; a known one without a
        live session takes the recorded address."""
        grace = time.monotonic() + self.session_timeout_s
        for node_id in node_ids:
            address = addresses[node_id]
            known = self.nodes.get(node_id)
            if known is None:
                self.nodes[node_id] = Node(node_id, address, grace_until=grace)
                self._session_to_node(node_id)
            elif self.sessions is None or not self.sessions.is_live(node_id):
                known.address = address

    def session_changed(self, node_id: int, session: NodeSession | None) -> None:
        """A node's etcd session began, changed or ended (whichever gateway it talks to)."""
        if session is None:
            return  # down from now on (is_live); the controller fences it
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                node = self.nodes[node_id] = Node(node_id, session.address)
            if node.session_lease != session.lease:
                node.fenced = False
                node.session_lease = session.lease
            node.address = session.address
            node.bulk_address = session.bulk_address
            node.offline = dict(session.offline)
            node.log_config_defaults = dict(session.log_config_defaults)
            node.shutting_down = session.shutting_down
            node.heard_from = True

    def _session_to_node(self, node_id: int) -> None:
        session = None if self.sessions is None else self.sessions.get(node_id)
        if session is not None:
            self.session_changed(node_id, session)

    def is_live(self, node_id: int) -> bool:
        if self.sessions is not None:
            return self.sessions.is_live(node_id)
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None:
                return False
            now = time.monotonic()
            if (
                node.last_heartbeat is not None
                and now - node.last_heartbeat < self.session_timeout_s
            ):
                return True
            return not node.heard_from and now < node.grace_until

    def live_nodes(self) -> list[int]:
        with self._lock:
            return sorted(n for n in self.nodes if self.is_live(n))

    def eligible(self, node_id: int) -> bool:
        """May lead or join an ISR: registered, live, not fenced, not shutting down."""
        node = self.nodes.get(node_id)
        return (
            node is not None
            and not node.fenced
            and not node.shutting_down
            and self.is_live(node_id)
        )
