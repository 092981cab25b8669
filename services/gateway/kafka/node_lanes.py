"""Each registered storage node's lane on this gateway's Kafka listener: a listening port of its
own, at the listener's port + the node's id (kernel-picked when the listener's port is 0),
bound when the node registers and closed when it is gone for good (decommissioned and holding
no replica), so every node is a broker Kafka clients reach, however many there are
(brokers.py says why a port per node and why this rule). Every lane is served alike by the
listener's network threads: any lane answers any request; a lane only names the broker a
client thinks it is talking to (DescribeLogDirs), and the leader a produce on it must find
there (lane_leaders.py).

The lanes follow the registry, never a request: a keeper thread re-reads the registered nodes
when the registry's metadata offset moves (a node record, a decommission, a reassignment
emptying a node) and binds or closes lanes; requests read the current lanes, an immutable
mapping replaced whole, without a lock. A port that cannot be bound (taken by another process)
is retried at each tick (LANE_RETRY_S) and meanwhile the node is listed at the listener's own
address (brokers.py), with a warning once. A node that registered a moment ago and has no lane
yet gets it when a request first asks for its address (one bind in the node's life, before
the keeper's tick).

Node 0's port is the listener's own (port + 0): that lane is the listener itself.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol

logger = logging.getLogger(__name__)

# A node's broker address on one listener (KafkaListener.node_address): (node, bound=True).
NodeAddress = Callable[..., "tuple[str, int] | None"]


class ListenerSide(NamedTuple):
    """The listener a client came through, as brokers are named to it: its advertised
    address and its nodes' lanes (a gateway may serve several listeners in tests)."""

    advertised_address: str | None = None
    node_address: NodeAddress | None = None


# How often the keeper looks at the registry's offset, and retries a port it could not bind:
# a new node is a broker at most this long after it registered (a node takes seconds to start,
# heartbeats every 2 s in production); the look costs one integer compare.
LANE_RETRY_S = 0.25
STOP_JOIN_TIMEOUT_S = 5.0
# The connections a lane is the broker of when it is no node's: the listener's own port when
# it is not node 0's (a port of 0: kernel-picked lanes).
NO_NODE = -1


class Lane(NamedTuple):
    node: int
    port: int  # bound here
    advertised_host: str
    advertised_port: int  # what Metadata names
    server: socket.socket | None  # None: the listener's own socket (node 0 at port + 0)


class RegisteredNodes(Protocol):
    """What the keeper reads of the registry (cluster/registry.py)."""

    @property
    def metadata_offset(self) -> int: ...

    def addresses(self) -> dict[int, str]: ...

    def decommissioned_nodes(self) -> set[int]: ...

    def replica_counts(self) -> dict[int, int]: ...


def lane_port(base_port: int, node: int) -> int | None:
    """The port of `node`'s lane from the listener's port `base_port` (0: kernel-picked), None
    when it passes 65535 (such a node is listed at the listener's address)."""
    if base_port == 0:
        return 0
    port = base_port + node
    return port if node >= 0 and port <= 65535 else None


def wanted_nodes(registry: RegisteredNodes) -> set[int]:
    """Every registered node but those decommissioned that hold no replica any more: a
    decommissioned node still serving replicas keeps its lane until they have moved off."""
    registered = set(registry.addresses())
    gone = registry.decommissioned_nodes()
    if gone:
        counts = registry.replica_counts()
        gone = {n for n in gone if not counts.get(n)}
    return registered - gone


class NodeLanes:
    def __init__(
        self,
        host: str,
        base_port: int,
        advertised: tuple[str, int] | None,
        serve: Callable[[socket.socket, int], None],
    ) -> None:
        """`base_port`: the listener's bound port as configured (0: kernel-picked lanes);
        `advertised`: the listener's advertised (host, port), lanes advertised at port + id;
        `serve(server, node)`: accepts on a lane's socket until it is closed (a thread's)."""
        self.host = host
        self.base_port = base_port
        self.advertised = advertised
        self._serve = serve
        self.lanes: Mapping[int, Lane] = {}  # replaced whole, read without a lock
        self._threads: dict[int, threading.Thread] = {}
        self.unplaced: set[int] = set()  # nodes whose lane cannot be bound (warned once)
        self.retrying = False  # a port was taken at the last sync: the keeper tries again
        self._lock = threading.Lock()  # one sync at a time

    def address(self, node: int) -> tuple[str, int] | None:
        lane = self.lanes.get(node)
        return None if lane is None else (lane.advertised_host, lane.advertised_port)

    def ruled_address(self, node: int) -> tuple[str, int] | None:
        """Where `node`'s lane is or would be by the rule, bound or not (a decommissioned
        node's, shown fenced); None when the port is kernel-picked and it has no lane."""
        bound = self.address(node)
        if bound is not None or lane_port(self.base_port, node) in (None, 0):
            return bound
        return self._advertised(node, self.base_port + node)

    def listener_node(self) -> int:
        """The node whose lane is the listener's own port (node 0 at port + 0), else NO_NODE."""
        lane = self.lanes.get(0)
        return 0 if lane is not None and lane.server is None else NO_NODE

    def sync(self, wanted: set[int]) -> None:
        """Bind a lane for each wanted node without one, close those of nodes no longer
        wanted."""
        with self._lock:
            self.retrying = False
            lanes = dict(self.lanes)
            for node in sorted(wanted - lanes.keys()):
                lane = self._bind(node)
                if lane is not None:
                    lanes[node] = lane
            closed = [lanes.pop(node) for node in sorted(lanes.keys() - wanted)]
            self.lanes = lanes
        for lane in closed:
            self._close(lane)
            logger.info("Kafka lane of node %d on port %d closed", lane.node, lane.port)

    def _bind(self, node: int) -> Lane | None:
        port = lane_port(self.base_port, node)
        if port is None:
            self._warn(node, f"its port {self.base_port}+{node} passes 65535")
            return None
        if self.base_port and port == self.base_port:  # node 0: the listener's own socket
            return Lane(node, port, *self._advertised(node, port), None)
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            server = socket.create_server((self.host, port), family=family, backlog=1024)
        except OSError as exc:
            self.retrying = True
            self._warn(node, f"port {port}: {exc}")
            return None
        bound = server.getsockname()[1]
        thread = threading.Thread(
            target=self._serve, args=(server, node), name=f"kafka-lane-{node}", daemon=True
        )
        self._threads[node] = thread
        thread.start()
        self.unplaced.discard(node)
        logger.info("Kafka lane of node %d on port %d", node, bound)
        return Lane(node, bound, *self._advertised(node, bound), server)

    def _advertised(self, node: int, bound: int) -> tuple[str, int]:
        if self.advertised is None:
            return self.host, bound
        host, port = self.advertised
        return host, port + node

    def _warn(self, node: int, why: str) -> None:
        if node not in self.unplaced:
            self.unplaced.add(node)
            logger.warning(
                "no Kafka lane for node %d (%s): listed at the listener's address", node, why
            )

    def _close(self, lane: Lane) -> None:
        if lane.server is None:
            return
        try:
            lane.server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        except OSError:
            pass
        lane.server.close()
        thread = self._threads.pop(lane.node, None)
        if thread is not None:
            thread.join(STOP_JOIN_TIMEOUT_S)

    def close(self) -> None:
        with self._lock:
            lanes, self.lanes = self.lanes, {}
        for lane in lanes.values():
            self._close(lane)


class LaneKeeper:
    """The thread that keeps `lanes` in step with the registry's nodes."""

    def __init__(self, lanes: NodeLanes, registry: RegisteredNodes) -> None:
        self.lanes = lanes
        self.registry = registry
        self._changed = threading.Event()
        self._stopped = threading.Event()
        self._seen_offset: int | None = None
        self._thread = threading.Thread(target=self._run, name="kafka-lane-keeper", daemon=True)

    def changed(self, *_: object) -> None:
        """A registry listener: look now rather than at the next tick."""
        self._changed.set()

    def start(self) -> None:
        self.refresh()  # the nodes known at start have their lanes before a client asks
        self._thread.start()

    def refresh(self) -> None:
        offset = self.registry.metadata_offset
        wanted = wanted_nodes(self.registry)
        self._seen_offset = offset
        self.lanes.sync(wanted)

    def refresh_if_behind(self) -> bool:
        """Refresh now when the registry moved since the last look (a node's lane asked for
        before the keeper's tick: the first Metadata after it registered); else nothing, so
        asking for a node with no lane costs one compare."""
        if self.registry.metadata_offset == self._seen_offset:
            return False
        self.refresh()
        return True

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._changed.wait(LANE_RETRY_S)
            self._changed.clear()
            if self._stopped.is_set():
                return
            try:
                if self.lanes.retrying or self.registry.metadata_offset != self._seen_offset:
                    self.refresh()
            except Exception:  # the next tick tries again
                logger.exception("keeping the Kafka lanes failed")

    def stop(self) -> None:
        self._stopped.set()
        self._changed.set()
        self._thread.join(STOP_JOIN_TIMEOUT_S)
        self.lanes.close()
