"""The transaction coordinator's marker writer against a gRPC storage node on loopback that
serves WriteTxnMarkers: one call per leader with all its partitions and the marker's producer,
epoch, result and coordinator epoch; partitions that fail are sent again (and only they)
until they land; a deleted topic's partition needs none; once all landed each group of the
transaction is told (the groups core's hook) and the completion is handed on."""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest

from seglog.errors import (
    InvalidProducerEpochError,
    PermissionDeniedError,
    UnknownTopicOrPartitionError,
)
from seglog.v1 import common_pb2, storage_pb2, storage_pb2_grpc
from services.gateway.authorization import Authorization
from services.gateway.broker.caller import Caller
from services.gateway.cluster.registry_routes import Route
from services.gateway.node_connections import NodeConnections
from services.gateway.transactions.marker_calls import MarkerCalls
from services.gateway.transactions.markers import Completion, MarkerWriter
from tests.waiting import wait_until


class MarkerNode(storage_pb2_grpc.StorageNodeServicer):
    """Answers each partition with the next error of its script (then NONE); UNIMPLEMENTED
    for every call while `unimplemented` is set, as a node before transactions answers."""

    def __init__(self) -> None:
        self.requests: list[storage_pb2.WriteTxnMarkersRequest] = []
        self.scripts: dict[tuple[str, int], list[int]] = {}
        self.unimplemented = 0
        self.lock = threading.Lock()

    def WriteTxnMarkers(self, request, context):
        with self.lock:
            self.requests.append(request)
            if self.unimplemented:
                self.unimplemented -= 1
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            response = storage_pb2.WriteTxnMarkersResponse()
            for marker in request.markers:
                result = response.markers.add(producer_id=marker.producer_id)
                for ref in marker.partitions:
                    script = self.scripts.get((ref.topic, ref.partition), [])
                    error = script.pop(0) if script else common_pb2.NONE
                    result.partitions.add(topic=ref.topic, partition=ref.partition, error=error)
            return response


@dataclass
class Topic:
    partitions: list[int]


class Routes:
    """The registry's routes as the writer reads them: every partition led by node 1."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.topics = {"out": Topic([0, 1, 2]), "__consumer_offsets": Topic([0, 1])}

    def route(self, topic: str, partition: int) -> Route:
        return Route(topic, partition, 1, 4, self.address, True)


class Groups:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, bool]] = []

    def complete_transactional_offsets(self, group_id, producer_id, producer_epoch, committed):
        self.calls.append((group_id, producer_id, producer_epoch, committed))


@pytest.fixture
def node():
    servicer = MarkerNode()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    storage_pb2_grpc.add_StorageNodeServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(0)


def writer_for(address, groups=None):
    completed: list[Completion] = []
    connections = NodeConnections()
    writer = MarkerWriter(Routes(address), connections, completed.append, groups=groups)  # type: ignore[arg-type]
    return writer, completed, connections


COMPLETION = Completion(
    "tx",
    producer_id=77,
    producer_epoch=3,
    committed=True,
    coordinator_epoch=4,
    partitions=frozenset({("out", 0), ("out", 2), ("__consumer_offsets", 1)}),
    groups=frozenset({"g"}),
)


def test_one_call_per_leader_carries_the_marker_then_groups_and_completion(node):
    servicer, address = node
    groups = Groups()
    writer, completed, connections = writer_for(address, groups)
    try:
        writer.submit(COMPLETION)
        assert wait_until(lambda: completed == [COMPLETION], 10)
    finally:
        writer.stop()
        connections.close()
    (request,) = servicer.requests
    (marker,) = request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.committed) == (77, 3, True)
    assert marker.coordinator_epoch == 4
    assert sorted((p.topic, p.partition) for p in marker.partitions) == sorted(
        COMPLETION.partitions
    )
    assert request.timeout_ms > 0
    assert groups.calls == [("g", 77, 3, True)]


def test_failed_partitions_and_unimplemented_calls_are_retried_until_they_land(node):
    servicer, address = node
    servicer.unimplemented = 2  # a node before transactions, then one that has them
    servicer.scripts[("out", 2)] = [common_pb2.NOT_LEADER_OR_FOLLOWER]
    groups = Groups()
    writer, completed, connections = writer_for(address, groups)
    try:
        writer.submit(COMPLETION)
        assert wait_until(lambda: completed == [COMPLETION], 10)
        assert writer.pending_ids() == set()
    finally:
        writer.stop()
        connections.close()
    sent = [
        sorted((p.topic, p.partition) for p in r.markers[0].partitions) for r in servicer.requests
    ]
    assert len(sent) == 4
    assert sent[:3] == [sorted(COMPLETION.partitions)] * 3
    assert sent[3] == [("out", 2)]  # only the one that failed
    assert groups.calls == [("g", 77, 3, True)]  # once, after every marker landed


def test_a_completion_stays_pending_while_no_marker_lands(node):
    servicer, address = node
    servicer.unimplemented = 1_000_000
    groups = Groups()
    writer, completed, connections = writer_for(address, groups)
    try:
        writer.submit(COMPLETION)
        assert wait_until(lambda: len(servicer.requests) >= 3, 10)  # 0.1 s, 0.2 s, ...
        assert completed == [] and groups.calls == []
    finally:
        writer.stop()
        connections.close()


def test_a_deleted_topic_needs_no_marker(node):
    servicer, address = node
    writer, completed, connections = writer_for(address)
    gone = Completion("tx2", 5, 0, False, 1, frozenset({("deleted", 0), ("out", 1)}))
    try:
        writer.submit(gone)
        assert wait_until(lambda: completed == [gone], 10)
    finally:
        writer.stop()
        connections.close()
    assert [(p.topic, p.partition) for p in servicer.requests[0].markers[0].partitions] == [
        ("out", 1)
    ]
    assert servicer.requests[0].markers[0].committed is False


def test_a_client_s_write_txn_markers_is_sent_once_and_each_partition_answered(node):
    """kafka-transactions abort's WriteTxnMarkers (marker_calls.py): one call, no retry, each
    partition's outcome; a partition that does not exist is answered without a call; a
    caller without ClusterAction is refused before any."""
    servicer, address = node
    servicer.scripts[("out", 1)] = [common_pb2.INVALID_PRODUCER_EPOCH]
    connections = NodeConnections()
    marker = Completion("", 9, 2, False, 6, frozenset({("out", 0), ("out", 1), ("gone", 0)}))
    open_calls = MarkerCalls(Routes(address), connections, Authorization([], enabled=False))  # type: ignore[arg-type]
    closed_calls = MarkerCalls(Routes(address), connections, Authorization([], enabled=True))  # type: ignore[arg-type]
    caller = Caller("User:admin", "127.0.0.1", None, "kafka")
    try:
        (outcomes,) = open_calls.write(caller, [marker], 5000)
        with pytest.raises(PermissionDeniedError):
            closed_calls.write(caller, [marker], 5000)
    finally:
        connections.close()
    assert outcomes[("out", 0)] is None
    assert isinstance(outcomes[("out", 1)], InvalidProducerEpochError)
    assert isinstance(outcomes[("gone", 0)], UnknownTopicOrPartitionError)
    (request,) = servicer.requests  # the refused caller's call never went out
    assert request.timeout_ms == 5000
    (sent,) = request.markers
    assert (sent.producer_id, sent.producer_epoch, sent.committed, sent.coordinator_epoch) == (
        9,
        2,
        False,
        6,
    )
