"""The cluster's storage nodes as the broker core describes and changes them, for any caller:
the cluster's description (every registered node's liveness and load, the controller and
the running gateways) and a node's decommissioning (no new replicas or leaderships placed on
it, its leaderships handed over). The gRPC AdminService's DescribeCluster,
DecommissionNode and RecommissionNode are adapters over `NodeAdmin`.

Who may call: Describe on the cluster to describe it; Alter on the cluster to decommission or
recommission a node (where replicas may go is the cluster's to change, as reassignments are).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from .registry import Registry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeDescription:
    node_id: int
    address: str
    live: bool
    last_heartbeat_age_ms: int  # -1: never heard from (since this gateway started)
    leader_partitions: int
    replica_partitions: int
    decommissioned: bool


@dataclass(frozen=True)
class ClusterDescription:
    session_timeout_ms: int
    controller: str  # the controller gateway's address
    gateways: Sequence[str]  # every running gateway's
    nodes: Sequence[NodeDescription]  # by node id


class NodeAdmin:
    def __init__(
        self,
        registry: Registry,
        authorization: Authorization,
        cluster_view: Callable[[], tuple[str, list[str]]] | None = None,
    ) -> None:
        self.registry = registry
        self.authorization = authorization
        # The controller gateway's address and every running gateway's.
        self.cluster_view = cluster_view or (lambda: ("", []))

    def describe_cluster(self, caller: Caller) -> ClusterDescription:
        self.authorization.check(caller, [("Describe", *CLUSTER)], "DescribeCluster")
        controller, gateways = self.cluster_view()
        registry = self.registry
        counts = registry.leader_counts()
        held = registry.replica_counts()
        decommissioned = registry.decommissioned_nodes()
        nodes = []
        for node_id, node in sorted(registry.nodes.items()):
            age = -1
            if node.last_heartbeat is not None:
                age = int((time.monotonic() - node.last_heartbeat) * 1000)
            nodes.append(
                NodeDescription(
                    node_id,
                    node.address,
                    registry.is_live(node_id),
                    age,
                    counts.get(node_id, 0),
                    held.get(node_id, 0),
                    node_id in decommissioned,
                )
            )
        return ClusterDescription(
            int(registry.session_timeout_s * 1000), controller, list(gateways), nodes
        )

    def set_decommissioned(self, caller: Caller, node_id: int, decommissioned: bool) -> int:
        """Decommission (or recommission) the node; returns the leaderships handed over."""
        action = "DecommissionNode" if decommissioned else "RecommissionNode"
        self.authorization.check(caller, [("Alter", *CLUSTER)], action)
        moved = self.registry.set_decommissioned(node_id, decommissioned)
        logger.info(
            "node %d %s (%d leaderships handed over)",
            node_id,
            "decommissioned" if decommissioned else "recommissioned",
            len(moved),
        )
        return len(moved)
