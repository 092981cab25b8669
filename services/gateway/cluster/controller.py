"""The registry's controller loop and the partition states it tells the nodes.

One thread fences nodes whose session expired (their leaderships move, they leave the ISRs:
Registry.check_sessions) every quarter session timeout, and, with
`auto.leader.rebalance.enable`, gives leadership back to preferred replicas every
`leader.imbalance.check.interval.seconds`. Each tick also finishes the reassignments whose
target replicas are all in sync (reassignments.py) and deletes the removed replicas' logs.
With `auto.balance.enable`, every `auto.balance.interval.ms` it runs a round of automatic
balancing (auto_balance.py).

With several gateways (the etcd registry) only the elected one (election.py) runs this loop
and pushes; the others campaign on each tick. Its decisions carry the election's fence: the
first one refused (another gateway was elected meanwhile) makes it step down.

Every registration change is pushed at once to the nodes holding a replica of the partition
(StorageNode.UpdatePartitions, Kafka's LeaderAndIsr), so a failover does not wait for the
nodes' next heartbeats; a burst of changes (a node's failover is one batch) is one push per
node. A push carries the node's whole delta since the metadata offset it last reported (or
acknowledged), with the offset it brings the node to; a node whose offset is unknown gets the
changed states alone, with offset 0, and its next heartbeat's answer (a delta from its own
offset) repairs any push that was lost. Pushes run on their own thread, so a slow node never
holds the registry.

An ACL change that may narrow access is pushed to every live node at once as well (its
offset alone, `acls_narrowed_offset`): nodes then refuse clients' grants from before it
(bulk.md, "Grants and ACL changes") without waiting for their next heartbeat, which carries
it too. The calls are not waited for: the heartbeat repairs a push that was lost.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading

import grpc

from seglog.errors import SeglogError
from seglog.v1 import gateway_pb2

from ..coordination.election import ControllerElection, SoleController
from ..node_connections import NodeConnections
from .auto_balance import DEFAULT_AUTO_BALANCE_INTERVAL_MS, AutoBalancer
from .metadata_image import Topic
from .node_state import NodeView
from .partition_changes import PartitionAssignment, PartitionChange
from .registry import Registry
from .registry_store import ControllerFencedError
from .replica_deletion import delete_replicas

logger = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 2.0
# Kafka's leader.imbalance.check.interval.seconds.
DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S = 300


def partition_states(
    registry: Registry, partitions: list[PartitionChange] | None = None, node_id: int | None = None
) -> gateway_pb2.NodeAssignment:
    """A NodeAssignment of the given partitions (or every partition `node_id` holds a replica
    of), with every node's address so followers can reach their leaders."""
    if partitions is None:
        chosen = registry.assignment_for(-1 if node_id is None else node_id)
    else:
        chosen = registry.partitions_of(partitions)
    return _assignment(registry, chosen)


def view_states(registry: Registry, view: NodeView) -> gateway_pb2.NodeAssignment:
    """A NodeAssignment of a node's delta (or whole assignment) and the offset it brings
    the node to."""
    assignment = _assignment(registry, view.partitions)
    assignment.metadata_offset = view.offset
    assignment.full = view.full
    for topic, i in view.removed:
        assignment.removed.add(topic=topic, partition=i)
    return assignment


def _assignment(
    registry: Registry, chosen: list[tuple[Topic, int, PartitionAssignment]]
) -> gateway_pb2.NodeAssignment:
    assignment = gateway_pb2.NodeAssignment(cluster_id=registry.cluster_id)
    for topic, i, p in chosen:
        assignment.partitions.add(
            topic=topic.name,
            partition=i,
            leader_epoch=p.leader_epoch,
            configs=topic.configs,
            leader=p.leader,
            replicas=p.replicas,
            isr=p.isr,
            partition_epoch=p.partition_epoch,
            adding_replicas=p.adding,
            removing_replicas=p.removing,
            throttle_bytes_per_s=p.throttle_bytes_per_s,
            topic_id=topic.topic_id,
        )
    assignment.node_addresses.update(registry.addresses())
    assignment.node_bulk_addresses.update(registry.bulk_addresses())
    assignment.acls_narrowed_offset = registry.acls_narrowed_offset
    return assignment


class Controller:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        *,
        auto_leader_rebalance_enable: bool = True,
        leader_imbalance_check_interval_seconds: float = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S,
        election: ControllerElection | SoleController | None = None,
        auto_balancer: AutoBalancer | None = None,
        auto_balance_interval_s: float = DEFAULT_AUTO_BALANCE_INTERVAL_MS / 1000,
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.election = election or SoleController()
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.rebalance_interval_s = leader_imbalance_check_interval_seconds
        self.auto_balancer = auto_balancer
        self.auto_balance_interval_s = auto_balance_interval_s
        self._stop = threading.Event()
        self._pushes: queue.Queue[list[PartitionChange] | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._run, name="controller", daemon=True),
            threading.Thread(target=self._push_loop, name="partition-state-push", daemon=True),
        ]
        registry.listeners.append(self._pushes.put)
        self._narrowing_pushed = registry.acls_narrowed_offset
        registry.acl_listeners.append(self._acls_changed)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._pushes.put(None)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)

    def _run(self) -> None:
        tick_s = max(self.registry.session_timeout_s / 4, 0.05)
        until_rebalance_s = self.rebalance_interval_s
        until_balance_s = self.auto_balance_interval_s
        while not self._stop.wait(tick_s):
            try:
                if not self.election.is_controller:
                    self.election.campaign()
                    continue
                fence = self.election.fence
                self.registry.check_sessions(fence)
                removed = self.registry.complete_reassignments(fence)
                if removed:  # node calls off this thread: a slow node must not delay fencing
                    threading.Thread(
                        target=delete_replicas,
                        args=(self.registry, self.connections, removed),
                        name="moved-replica-deletions",
                        daemon=True,
                    ).start()
                until_rebalance_s -= tick_s
                if self.auto_leader_rebalance_enable and until_rebalance_s <= 0:
                    until_rebalance_s = self.rebalance_interval_s
                    self.registry.rebalance_leaders(fence)
                until_balance_s -= tick_s
                if self.auto_balancer is not None and until_balance_s <= 0:
                    until_balance_s = self.auto_balance_interval_s
                    self.auto_balancer.tick(fence)
            except ControllerFencedError as exc:
                self.election.step_down(str(exc))
            except SeglogError as exc:  # etcd unreachable: decide again next tick
                logger.warning("controller step failed: %s", exc)
            except Exception:
                logger.exception("controller step failed")

    def _push_loop(self) -> None:
        while True:
            changed = self._pushes.get()
            if changed is None:
                return
            while not self._pushes.empty():  # coalesce a burst into one push per node
                more = self._pushes.get()
                if more is None:
                    return
                changed = sorted(set(changed) | set(more))
            try:
                self._push(changed)
            except Exception:
                logger.exception("pushing partition states failed")

    def _push(self, changed: list[PartitionChange]) -> None:
        if not self.election.is_controller:
            return  # the controller pushes (it learns other gateways' changes by watch)
        by_node: dict[int, list[PartitionChange]] = {}
        for topic, i, p in self.registry.partitions_of(changed):
            for replica in p.replicas:
                by_node.setdefault(replica, []).append((topic.name, i))
        addresses = self.registry.addresses()
        calls = []
        for node_id, partitions in by_node.items():
            if node_id not in addresses or not self.registry.is_live(node_id):
                continue
            stub = self.connections.get(node_id, addresses[node_id]).stub
            message = self._message(node_id, partitions)
            call = stub.UpdatePartitions.future(message, timeout=PUSH_TIMEOUT_S)
            calls.append((node_id, message.metadata_offset, call))
        for node_id, offset, call in calls:
            try:
                call.result()
            except grpc.RpcError as exc:  # its next heartbeat carries the same states
                logger.info("pushing partition states to node %d failed: %s", node_id, exc.code())
            else:
                self.registry.pushed(node_id, offset)

    def _acls_changed(self, _acls: object, _offset: int) -> None:
        """The registry's ACL notification (one at a time): a new narrowing is pushed."""
        narrowed = self.registry.acls_narrowed_offset
        if narrowed <= self._narrowing_pushed or not self.election.is_controller:
            return
        self._narrowing_pushed = narrowed
        message = gateway_pb2.NodeAssignment(
            acls_narrowed_offset=narrowed, cluster_id=self.registry.cluster_id
        )
        for node_id, address in self.registry.addresses().items():
            if not self.registry.is_live(node_id):
                continue
            call = self.connections.get(node_id, address).stub.UpdatePartitions.future(
                message, timeout=PUSH_TIMEOUT_S
            )
            call.add_done_callback(functools.partial(_narrowing_pushed, node_id))

    def _message(
        self, node_id: int, partitions: list[PartitionChange]
    ) -> gateway_pb2.NodeAssignment:
        """The node's delta since the offset it last reported, or, that unknown or too
        old, the changed states alone (offset 0: they do not advance it)."""
        node = self.registry.nodes.get(node_id)
        since = 0 if node is None else node.metadata_offset
        if since > 0:
            view = self.registry.node_view(node_id, since)
            if not view.full:
                return view_states(self.registry, view)
        return partition_states(self.registry, partitions)


def _narrowing_pushed(node_id: int, call: grpc.Future) -> None:
    error = call.exception()
    if error is not None:  # the node's next heartbeat's answer carries it
        logger.info("pushing an ACL narrowing to node %d failed: %s", node_id, error)
