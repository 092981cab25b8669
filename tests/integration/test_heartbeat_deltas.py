"""Heartbeat answers as metadata deltas (gateway.proto NodeAssignment), over the gateway's
real Registry service: registration answers the whole assignment with the registry's
offset; a heartbeat answers only what changed for the node after its offset (nothing, new
states, removals), or everything when the offset is 0 or not one this registry knows."""

from __future__ import annotations

import grpc
import pytest

from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from tests.cluster import LocalCluster

NODE_ADDRESS = "127.0.0.1:1"  # nothing listens: pushes to it fail, heartbeats repair them


@pytest.fixture
def gateway(tmp_path):
    cluster = LocalCluster(tmp_path / "c", nodes=0)
    channel = grpc.insecure_channel(cluster.gateway.internal_address)
    yield cluster, gateway_pb2_grpc.RegistryStub(channel)
    channel.close()
    cluster.close()


def _beat(stub, offset, call="Heartbeat"):
    message = gateway_pb2.NodeHeartbeat(node_id=1, address=NODE_ADDRESS, metadata_offset=offset)
    return getattr(stub, call)(message, timeout=10)


def _named(partitions):
    return sorted((p.topic, p.partition) for p in partitions)


def test_heartbeats_are_answered_with_what_changed_since_the_nodes_offset(gateway):
    cluster, stub = gateway
    registered = _beat(stub, 0, "RegisterNode")
    assert registered.full and registered.metadata_offset > 0
    cluster.admin.create_topic("t", 2, 1)
    created = _beat(stub, registered.metadata_offset)
    assert not created.full and created.metadata_offset > registered.metadata_offset
    assert _named(created.partitions) == [("t", 0), ("t", 1)]
    idle = _beat(stub, created.metadata_offset)
    assert not idle.full and not idle.partitions and not idle.removed
    assert idle.metadata_offset == created.metadata_offset
    assert idle.node_addresses == {1: NODE_ADDRESS}
    cluster.admin.delete_topic("t")
    deleted = _beat(stub, created.metadata_offset)
    assert not deleted.full and not deleted.partitions
    assert _named(deleted.removed) == [("t", 0), ("t", 1)]
    cluster.admin.create_topic("u", 1, 1)
    for offset in (0, deleted.metadata_offset + 1_000_000):  # nothing yet, another registry's
        whole = _beat(stub, offset)
        assert whole.full and _named(whole.partitions) == [("u", 0)]
