"""A scripted registry for a storage node's session tests: a real gRPC Registry server on
loopback whose answers each test decides (whole assignments, deltas with removals, metadata
offsets, refusals that make the session lapse), recording what it received, and a real
StorageNode started against it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc

from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from services.storage_node.server import StorageNode
from services.storage_node.settings import NodeConfig

NODE_ID = 1
HEARTBEAT_MS = 100
# The scripted registry's cluster (a node sets partitions aside only on its cluster's word).
CLUSTER_ID = "Vw0MOr7cTMqUabAmiOSm4g"


@dataclass(frozen=True)
class Received:
    at: float  # time.monotonic() when the registry received it
    method: str
    heartbeat: gateway_pb2.NodeHeartbeat


class ScriptedRegistry(gateway_pb2_grpc.RegistryServicer):
    """Answers every RegisterNode and Heartbeat with `answer(heartbeat)`, or refuses them
    (UNAVAILABLE) while `refusing` is set; records what it received."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.answer: Callable[[gateway_pb2.NodeHeartbeat], gateway_pb2.NodeAssignment] = (
            lambda heartbeat: assignment([], offset=1, full=True)
        )
        self.refusing = threading.Event()
        self.refusal_code = grpc.StatusCode.UNAVAILABLE
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        gateway_pb2_grpc.add_RegistryServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _answer(
        self, method: str, request: gateway_pb2.NodeHeartbeat, context: grpc.ServicerContext
    ) -> gateway_pb2.NodeAssignment:
        self.received.append(Received(time.monotonic(), method, request))
        if self.refusing.is_set():
            context.abort(self.refusal_code, "refusing, as the test asked")
        return self.answer(request)

    def RegisterNode(self, request, context):
        return self._answer("RegisterNode", request, context)

    def Heartbeat(self, request, context):
        return self._answer("Heartbeat", request, context)

    def heartbeats_since(self, at: float) -> list[Received]:
        return [r for r in list(self.received) if r.at >= at]


def states(topic: str, count: int, *, leader_epoch: int = 0) -> list[gateway_pb2.AssignedPartition]:
    """`count` partitions of `topic` led by the node alone."""
    return [
        gateway_pb2.AssignedPartition(
            topic=topic,
            partition=i,
            leader=NODE_ID,
            leader_epoch=leader_epoch,
            replicas=[NODE_ID],
            isr=[NODE_ID],
        )
        for i in range(count)
    ]


def assignment(
    partitions: list[gateway_pb2.AssignedPartition],
    *,
    offset: int,
    full: bool = False,
    removed: list[tuple[str, int]] = (),  # type: ignore[assignment]
) -> gateway_pb2.NodeAssignment:
    message = gateway_pb2.NodeAssignment(
        partitions=partitions,
        heartbeat_interval_ms=HEARTBEAT_MS,
        metadata_offset=offset,
        full=full,
        cluster_id=CLUSTER_ID,
    )
    for topic, partition in removed:
        message.removed.add(topic=topic, partition=partition)
    return message


def start_node(tmp_path, registry: ScriptedRegistry, session_timeout_ms: int) -> StorageNode:
    node = StorageNode(
        NodeConfig(
            node_id=NODE_ID,
            data_dir=tmp_path / "node",
            gateway=f"127.0.0.1:{registry.port}",
            heartbeat_interval_ms=HEARTBEAT_MS,
            session_timeout_ms=session_timeout_ms,
        )
    )
    node.start()
    assert node.session is not None and node.session.registered.wait(15)
    return node
