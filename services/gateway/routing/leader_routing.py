"""A partition's leader as the gateway routes to it: from the registry's image (never read
per request from the store), refused with NOT_LEADER when the caller names a stale leader
epoch and LEADER_NOT_AVAILABLE when the leader's node is down; and the error a node's failed
call stands for."""

from __future__ import annotations

import grpc

from seglog.errors import LeaderNotAvailableError, NodeUnavailableError, NotLeaderError, SeglogError
from seglog.rpc.status import error_from_rpc

from ..cluster.registry import Registry, Route
from ..node_connections import NodeConnections
from .leader_appends import Target


class LeaderRouting:
    def __init__(self, registry: Registry, connections: NodeConnections) -> None:
        self.registry = registry
        self.connections = connections

    def route(self, topic: str, partition: int, client_epoch: int) -> tuple[Route, Target]:
        route = self.registry.route(topic, partition)
        if client_epoch >= 0 and client_epoch != route.leader_epoch:
            raise NotLeaderError(
                f"{topic}-{partition}: leader epoch {client_epoch} is stale, the current one "
                f"is {route.leader_epoch}; refresh metadata"
            )
        if not route.live or route.address is None:
            raise LeaderNotAvailableError(
                f"{topic}-{partition}: leader node {route.leader} is not available"
            )
        connection = self.connections.get(route.leader, route.address)
        return route, Target(route.leader, connection, route.bulk_address)

    def target(self, topic: str, partition: int, client_epoch: int) -> Target:
        return self.route(topic, partition, client_epoch)[1]

    def node_failure(self, target: Target, exc: grpc.RpcError) -> SeglogError:
        error = error_from_rpc(exc)
        # The transport's own failure (no seglog reason attached), or CANCELLED: the node's
        # channel was closed under the call (the node re-registered at a new address) or
        # the node stopped mid-call. A node's own answer keeps its reason.
        if isinstance(error, NodeUnavailableError):
            return LeaderNotAvailableError(f"node {target.node_id} unavailable: {error}")
        return error
