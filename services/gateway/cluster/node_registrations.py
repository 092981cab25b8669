"""The registry's decisions about storage nodes (the registry's `registrations`, registry.py):
sessions (registration, heartbeats, expiry), fencing and the elections it causes, controlled
shutdown, preferred leaders, and the ISR changes leaders ask for (AlterPartition). The rules
are partition_changes.py's; this module finds the few registrations a decision touches,
stores the records, and tells the listeners.

- A node is fenced when its session expires and when a new process of it registers (a live
  process a restarted gateway meets is only admitted: it lost nothing).
- A new process back from an unclean shutdown is trusted with no committed record
  (partition_changes.forget_unclean, Kafka's KIP-966).
- A node an operator decommissions (`set_decommissioned`, a node_state record, so it holds
  across gateway restarts and controller changes) takes no new replica (registry.py's
  placement, reassignments.py) and hands its leaderships to other in-sync replicas; every
  election prefers another replica (partition_changes.py), and it leads only where it is the
  last one that can: the partition stays writable while the node is up.
- A node's min.insync.replicas default is stored in its node record at each registration, so
  the ELR is counted right before its first heartbeat after a gateway restart.
"""

from __future__ import annotations

import logging
import time

from seglog.errors import InvalidRequestError, UnknownTopicOrPartitionError

from ..coordination.election import Fence
from .metadata_records import node_record, node_state_record, partition_record
from .node_state import Node
from .partition_changes import (
    PartitionAssignment,
    PartitionChange,
    alter_isr,
    elect_leaderless,
    fence,
    forget_unclean,
    hand_over,
    restore_preferred,
)
from .registry_routes import RegistryRoutes
from .registry_state import MIN_ISR_CONFIG, RegistryState, min_isr_setting, retrying

logger = logging.getLogger(__name__)


class NodeRegistrations:
    def __init__(self, state: RegistryState, routes: RegistryRoutes) -> None:
        self._state = state
        self._routes = routes

    def register_node(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None = None,
        log_config_defaults: dict[str, str] | None = None,
        bulk_address: str = "",
        *,
        new_process: bool = True,
        unclean_shutdown: bool = False,
    ) -> None:
        """A node starting a session. A new process: its previous incarnation is fenced,
        and after an unclean shutdown it is trusted with no committed record (it may have
        lost unflushed ones). Then it is live again: elected where it was the last in-sync
        replica, a follower elsewhere until it catches up and its leader adds it back. A
        process that already registered (`new_process` False: a restarted gateway met its
        heartbeat) lost nothing and is only admitted."""
        if self._state.sessions is not None:
            self._state.sessions.open(
                node_id,
                address,
                bulk_address=bulk_address,
                offline=offline,
                log_config_defaults=log_config_defaults,
            )
        self._register(
            node_id,
            address,
            offline,
            log_config_defaults,
            bulk_address,
            new_process,
            unclean_shutdown,
        )

    @retrying
    def _register(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None,
        log_config_defaults: dict[str, str] | None,
        bulk_address: str,
        new_process: bool,
        unclean_shutdown: bool,
    ) -> None:
        with self._state._lock:
            node = self._state.nodes.get(node_id)
            if node is None:
                node = self._state.nodes[node_id] = Node(node_id, address)
            working = self._state._working(
                self._state.image.hosted.get(node_id, set()) | self._state.image.leaderless
            )
            changed: set[PartitionChange] = set()
            if new_process:
                changed = fence(
                    working.items(),
                    node_id,
                    self._state._eligible,
                    self._state._min_isr,
                    self._state._avoided,
                )
                if unclean_shutdown:
                    changed |= forget_unclean(
                        working.items(), node_id, self._state._eligible, self._state._avoided
                    )
            node.address = address
            node.bulk_address = bulk_address
            node.offline = dict(offline or {})
            node.log_config_defaults = dict(log_config_defaults or {})
            node.last_heartbeat = time.monotonic()
            node.heard_from = True
            node.fenced = node.shutting_down = False
            node.metadata_offset = 0  # answered with its whole assignment
            changed |= elect_leaderless(
                working.items(), self._state._eligible, self._state._avoided
            )
            min_isr = min_isr_setting(node.log_config_defaults.get(MIN_ISR_CONFIG))
            self._state._commit(
                [
                    node_record(node_id, address, min_isr),
                    *self._state._partition_records(working, changed),
                ]
            )
        self._state._notify(changed)

    def heartbeat(
        self,
        node_id: int,
        address: str,
        offline: dict[tuple[str, int], str] | None = None,
        bulk_address: str = "",
        metadata_offset: int = 0,
    ) -> bool:
        """Record a heartbeat; False when the node must register first (unknown to this
        registry, its address changed, or its session expired and it was fenced)."""
        if self._state.sessions is not None and not self._state.sessions.keep_alive(
            node_id, address, offline=dict(offline or {}), bulk_address=bulk_address
        ):
            return False
        with self._state._lock:
            node = self._state.nodes.get(node_id)
            if node is None or node.address != address:
                return False
            if node.fenced and self._state.sessions is None:
                return False
            node.offline = dict(offline or {})
            node.bulk_address = bulk_address
            node.last_heartbeat = time.monotonic()
            node.heard_from = True
            node.metadata_offset = metadata_offset
            return True

    @retrying
    def check_sessions(self, controller: Fence | None = None) -> list[PartitionChange]:
        """The controller's tick: fence every node whose session expired (Kafka's
        BrokerHeartbeatManager), elect leaders where one became possible, all in one batch.
        It looks only at the partitions of the nodes found down and at the leaderless ones
        (the image's indexes), the latter only when a node's eligibility or the image changed
        since it last looked: an idle tick examines no partition. A node is marked fenced
        only once its fencing is stored, so a retry on newer state fences it again (a newly
        elected controller, whose marks are all clear, fences each down node once; fencing
        twice changes nothing)."""
        with self._state._lock:
            changed: set[PartitionChange] = set()
            down = [
                n
                for n in self._state.nodes.values()
                if not n.fenced and not self._state.is_live(n.node_id)
            ]
            election = (
                frozenset(n for n in self._state.nodes if self._state._eligible(n)),
                self._state.image.offset,
            )
            wanted = set()
            if self._state.image.leaderless and election != self._state.last_election:
                wanted |= self._state.image.leaderless
            for node in down:
                wanted |= self._state.image.hosted.get(node.node_id, set())
            working = self._state._working(wanted)
            for node in down:
                changed |= fence(
                    working.items(),
                    node.node_id,
                    self._state._eligible,
                    self._state._min_isr,
                    self._state._avoided,
                )
            changed |= elect_leaderless(
                working.items(), self._state._eligible, self._state._avoided
            )
            if changed:
                self._state._commit(self._state._partition_records(working, changed), controller)
            for node in down:
                node.fenced = True
                # Said once per lapse: an operator (and the fault campaign) can tell a node's
                # session ending from its leaderships moving for another reason.
                logger.warning(
                    "node %d fenced: its session expired (no heartbeat answered within the "
                    "session timeout)",
                    node.node_id,
                )
            self._state.last_election = election if not down and not changed else None
        return self._state._notify(changed)

    def controlled_shutdown(self, node_id: int) -> bool:
        """A node asks to stop (Kafka's WantShutDown): its leaderships move to other in-sync
        replicas and it leaves the ISRs it shares. True once it leads nothing."""
        if self._state.sessions is not None:
            self._state.sessions.shut_down(node_id)
        return self._shut_down(node_id)

    @retrying
    def _shut_down(self, node_id: int) -> bool:
        with self._state._lock:
            node = self._state.nodes.get(node_id)
            if node is None:
                return True
            node.shutting_down = True
            working = self._state._working(self._state.image.hosted.get(node_id, set()))
            changed = fence(
                working.items(),
                node_id,
                self._state._eligible,
                self._state._min_isr,
                self._state._avoided,
            )
            if changed:
                self._state._commit(self._state._partition_records(working, changed))
            leads = bool(self._state.image.led.get(node_id))
        self._state._notify(changed)
        return not leads

    @retrying
    def set_decommissioned(self, node_id: int, decommissioned: bool) -> list[PartitionChange]:
        """Mark a registered node decommissioned (or not, again); the leaderships it hands
        over. Marking it again changes nothing."""
        with self._state._lock:
            if node_id not in self._state.image.node_addresses:
                raise InvalidRequestError(
                    f"node {node_id} is not registered "
                    f"(registered: {sorted(self._state.image.node_addresses)})"
                )
            if (node_id in self._state.image.decommissioned) == decommissioned:
                return []
            working = self._state._working(
                self._state.image.led.get(node_id, set()) if decommissioned else ()
            )
            avoid = self._state.image.decommissioned | {node_id}
            changed = hand_over(working.items(), node_id, self._state._eligible, avoid)
            self._state._commit(
                [
                    node_state_record(node_id, decommissioned),
                    *self._state._partition_records(working, changed),
                ]
            )
        return self._state._notify(changed)

    @retrying
    def rebalance_leaders(self, controller: Fence | None = None) -> list[PartitionChange]:
        """Kafka's preferred-leader election: each partition whose first replica is in the
        ISR and eligible but does not lead gets it back as leader. And a partition a
        decommissioned node still leads (it was the only in-sync replica when it was
        decommissioned) goes to another in-sync replica once there is one."""
        with self._state._lock:
            wanted = set(self._state.image.misled)
            for node_id in self._state._avoided:
                wanted |= self._state.image.led.get(node_id, set())
            working = self._state._working(wanted)
            changed = restore_preferred(
                working.items(), self._state._eligible, self._state._avoided
            )
            for node_id in self._state._avoided:
                changed |= hand_over(
                    working.items(), node_id, self._state._eligible, self._state._avoided
                )
            if changed:
                self._state._commit(self._state._partition_records(working, changed), controller)
        return self._state._notify(changed)

    @retrying
    def alter_partition(
        self,
        node_id: int,
        topic_name: str,
        partition: int,
        leader_epoch: int,
        partition_epoch: int,
        new_isr: list[int],
    ) -> PartitionAssignment:
        """Kafka's AlterPartition, as the controller validates it; returns the partition's
        new registration. Errors change nothing."""
        with self._state._lock:
            p = self._partition(topic_name, partition).copy()
            alter_isr(
                p,
                f"{topic_name}-{partition}",
                node_id,
                leader_epoch,
                partition_epoch,
                new_isr,
                self._state._eligible,
                self._state._min_isr(topic_name),
            )
            self._state._commit([partition_record(topic_name, partition, p.to_json())])
            return p.copy()

    def _partition(self, topic_name: str, partition: int) -> PartitionAssignment:
        topic = self._routes.topic(topic_name)
        if not 0 <= partition < len(topic.partitions):
            raise UnknownTopicOrPartitionError(
                f"{topic_name} has partitions 0..{len(topic.partitions) - 1}, not {partition}"
            )
        return topic.partitions[partition]
