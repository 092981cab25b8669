"""Kept connections to storage nodes' bulk listeners, a pool per node: a request takes an idle
connection (or opens one), carries one request and its answer on it, and gives it back, so
concurrent requests to one node go on separate connections. Used by the produce connections
(produce_connections.py: the gateway's produce relay and producers sending to their leaders)
and by the gateway's fetch relay (services/gateway/routing/fetch_relay.py).

Past `max_connections_per_node` in use, or while a node is left alone after it refused the
bulk path or could not be reached (`refuse`), `take` answers None: the caller uses gRPC.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from dataclasses import dataclass, field

from .bulk_client import BulkConnection, BulkFetchError

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2.0
# A node whose listener could not be reached (refused, timed out, a TLS handshake it failed)
# is left alone this long: a client outside the cluster that cannot route to the nodes' bulk
# addresses would otherwise wait CONNECT_TIMEOUT_S before every request.
RETRY_UNREACHABLE_AFTER_S = 10.0


@dataclass
class NodePool:
    node_id: int
    address: str
    idle: list[BulkConnection] = field(default_factory=list)
    connections: int = 0  # open, idle or carrying a request
    refused_until: float = 0.0  # monotonic: refused or unreachable, gRPC until then


class BulkPool:
    def __init__(
        self,
        max_connections_per_node: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        traced: bool = False,
    ) -> None:
        self.ssl_context = ssl_context
        self.traced = traced
        self.max_connections_per_node = max_connections_per_node
        self._lock = threading.Lock()
        self._nodes: dict[int, NodePool] = {}
        self._closed = False

    def take(self, node_id: int, address: str) -> tuple[NodePool, BulkConnection] | None:
        """A connection to the node's listener at `address` for one request, with the pool
        it goes back to (`give_back`); None when the caller should use gRPC."""
        with self._lock:
            node = self._usable_node(node_id, address)
            if node is None:
                return None
            connection = self._idle_connection(node)
            if connection is not None:
                return node, connection
            if node.connections >= self.max_connections_per_node:
                return None
            node.connections += 1
        try:
            connection = BulkConnection.open(
                address,
                connect_timeout_s=CONNECT_TIMEOUT_S,
                ssl_context=self.ssl_context,
                traced=self.traced,
            )
        except BulkFetchError as exc:
            logger.debug("bulk connection to node %d: %s", node_id, exc)
            with self._lock:
                node.connections -= 1
                node.refused_until = time.monotonic() + RETRY_UNREACHABLE_AFTER_S
            return None
        return node, connection

    def take_idle(self, node_id: int, address: str) -> tuple[NodePool, BulkConnection] | None:
        """`take` without opening a connection (which blocks): None when none is idle."""
        with self._lock:
            node = self._usable_node(node_id, address)
            if node is None:
                return None
            connection = self._idle_connection(node)
            return None if connection is None else (node, connection)

    def _usable_node(self, node_id: int, address: str) -> NodePool | None:
        """The node's pool, None while the bulk path is not to be tried. Under the lock."""
        if self._closed:
            return None
        node = self._node(node_id, address)
        return None if node.refused_until > time.monotonic() else node

    @staticmethod
    def _idle_connection(node: NodePool) -> BulkConnection | None:
        """An idle connection the node has not closed meanwhile. Under the lock."""
        while node.idle:
            connection = node.idle.pop()
            if not connection.peer_closed():
                return connection
            connection.close()
            node.connections -= 1
        return None

    def give_back(self, node: NodePool, connection: BulkConnection) -> None:
        """Keep the connection for the next request; closed (it failed, or the node refused
        the grant), or its node moved or the pool closed meanwhile, it is counted out."""
        with self._lock:
            keep = (
                not connection.closed and not self._closed and self._nodes.get(node.node_id) is node
            )
            if keep:
                node.idle.append(connection)
                return
            node.connections -= 1
        connection.close()

    def refuse(self, node: NodePool, seconds: float) -> None:
        """Leave the node to gRPC for `seconds` (it refused the bulk path)."""
        with self._lock:
            node.refused_until = time.monotonic() + seconds

    def open_connections(self, node_id: int) -> tuple[int, int]:
        """The node's connections open (idle or carrying a request), and idle."""
        with self._lock:
            node = self._nodes.get(node_id)
            return (0, 0) if node is None else (node.connections, len(node.idle))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            nodes, self._nodes = self._nodes, {}
        for node in nodes.values():
            for connection in node.idle:
                connection.close()

    def _node(self, node_id: int, address: str) -> NodePool:
        """The node's pool, fresh when it moved to another address (its idle connections to
        the old one are closed). Called under the lock."""
        node = self._nodes.get(node_id)
        if node is None or node.address != address:
            if node is not None:
                for connection in node.idle:
                    connection.close()
                node.idle.clear()
            node = self._nodes[node_id] = NodePool(node_id, address)
        return node
