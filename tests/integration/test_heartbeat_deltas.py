"""Heartbeat answers as metadata deltas (gateway.proto NodeAssignment), over the gateway's
real Registry service: registration answers the whole assignment with the registry's
offset; a heartbeat answers only what changed for the node after its offset (nothing, new
states, removals), or everything when the offset is 0 or not one this registry knows."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from seglog.v1 import gateway_pb2, gateway_pb2_grpc, storage_pb2, storage_pb2_grpc
from tests.cluster import LocalCluster
from tests.waiting import wait_until

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


class _PushRecorder(storage_pb2_grpc.StorageNodeServicer):
    """A stand-in node's StorageNode service: it only records the registry's pushes."""

    def __init__(self) -> None:
        self.pushes: list[gateway_pb2.NodeAssignment] = []

    def UpdatePartitions(self, request, context):
        self.pushes.append(request)
        return storage_pb2.UpdatePartitionsResponse()


def _stand_in_node():
    recorder = _PushRecorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    storage_pb2_grpc.add_StorageNodeServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, recorder, f"127.0.0.1:{port}"


def test_a_failover_is_pushed_as_the_nodes_delta_with_its_offset(gateway):
    """A node whose offset the registry knows (from its heartbeat) is pushed its whole
    delta since then, with the offset it brings it to; one whose offset is unknown (0) is
    pushed the changed states alone, with offset 0 (they do not advance it)."""
    cluster, stub = gateway
    nodes = {node_id: _stand_in_node() for node_id in (1, 2, 3)}
    try:
        offsets = {}
        for node_id, (_, _, address) in nodes.items():
            beat = gateway_pb2.NodeHeartbeat(node_id=node_id, address=address)
            offsets[node_id] = stub.RegisterNode(beat, timeout=10).metadata_offset
        cluster.admin.create_topic("t", 6, 3)
        for node_id in (1, 2):  # node 3 reports nothing: its offset stays unknown
            beat = gateway_pb2.NodeHeartbeat(
                node_id=node_id, address=nodes[node_id][2], metadata_offset=offsets[node_id]
            )
            offsets[node_id] = stub.Heartbeat(beat, timeout=10).metadata_offset
        for _, recorder, _ in nodes.values():
            recorder.pushes.clear()
        registry = cluster.gateway.registry
        everything = {("t", i) for i in range(6)}  # node 1 holds a replica of each
        assert registry.controlled_shutdown(1)  # one batch: it leads nothing now
        assert wait_until(lambda: nodes[2][1].pushes and nodes[3][1].pushes)
        [to_2] = nodes[2][1].pushes  # one push per node
        assert not to_2.full and to_2.metadata_offset == registry.metadata_offset
        assert {(p.topic, p.partition) for p in to_2.partitions} == everything
        assert all(1 not in p.isr and p.leader != 1 for p in to_2.partitions)
        [to_3] = nodes[3][1].pushes
        assert to_3.metadata_offset == 0 and not to_3.full
        assert {(p.topic, p.partition) for p in to_3.partitions} == everything
        assert wait_until(lambda: registry.nodes[2].metadata_offset == to_2.metadata_offset)
    finally:
        for server, _, _ in nodes.values():
            server.stop(0)
