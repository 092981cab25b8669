"""Deleting the replicas a move took away, on their nodes (Kafka's StopReplica with delete):
for the reassignment core (partition_moves.py) and the controller's tick that finishes moves."""

from __future__ import annotations

import logging

import grpc

from seglog.v1 import storage_pb2

from ..node_connections import NodeConnections
from .partition_changes import PartitionChange
from .registry import Registry

logger = logging.getLogger(__name__)

NODE_CALL_TIMEOUT_S = 10.0


def delete_replicas(
    registry: Registry, connections: NodeConnections, removed: dict[PartitionChange, list[int]]
) -> None:
    """The logs of replicas a move (or a cancelled move) took away are deleted on their
    nodes (Kafka's StopReplica with delete). A node that is down, or that set the partition
    aside on the registry's push before this call (kept on disk as `-stray`), keeps its copy
    for the operator."""
    addresses = registry.addresses()
    for (topic, partition), replicas in removed.items():
        for replica in replicas:
            if replica not in addresses or not registry.is_live(replica):
                continue
            stub = connections.get(replica, addresses[replica]).stub
            request = storage_pb2.DeletePartitionRequest(
                topic=topic, partition=partition, cluster_id=registry.cluster_id
            )
            try:
                stub.DeletePartition(request, timeout=NODE_CALL_TIMEOUT_S)
            except grpc.RpcError as exc:
                logger.info(
                    "deleting moved %s-%d on node %d: %s", topic, partition, replica, exc.code()
                )
