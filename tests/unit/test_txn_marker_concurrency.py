"""The marker writer's rounds against two gRPC storage nodes on loopback that serve
WriteTxnMarkers: markers of transactions on different leaders go out at once (neither waits
for the other's answer), and a marker refused by a leader that lost its partition is sent to
the new leader as soon as the registry reports the change (the gateway's registry, to which
the transactions core subscribes the writer), not after the retry backoff."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest

from seglog.v1 import common_pb2, storage_pb2, storage_pb2_grpc
from services.gateway.authorization import Authorization
from services.gateway.cluster.registry import Registry
from services.gateway.cluster.registry_routes import Route
from services.gateway.coordination.group_coordinators import SoleCoordinator
from services.gateway.node_connections import NodeConnections
from services.gateway.transactions.markers import Completion, MarkerWriter
from services.gateway.transactions.transactions_core import TransactionsCore
from tests.waiting import wait_until

HOLD_S = 10.0  # how long a node keeps a call waiting for the other node's call


class HoldingNode(storage_pb2_grpc.StorageNodeServicer):
    """Answers a call only once `release` is set (or HOLD_S passed, then REQUEST_TIMED_OUT for
    every partition); `refuse` partitions are answered NOT_LEADER_OR_FOLLOWER."""

    def __init__(self) -> None:
        self.arrived: list[tuple[float, list[tuple[str, int]]]] = []
        self.release = threading.Event()
        self.refuse: set[tuple[str, int]] = set()
        self.lock = threading.Lock()

    def WriteTxnMarkers(self, request, context):
        partitions = [(p.topic, p.partition) for p in request.markers[0].partitions]
        with self.lock:
            self.arrived.append((time.monotonic(), partitions))
        released = self.release.wait(HOLD_S)
        response = storage_pb2.WriteTxnMarkersResponse()
        result = response.markers.add(producer_id=request.markers[0].producer_id)
        for tp in partitions:
            error = common_pb2.NONE
            if not released:
                error = common_pb2.REQUEST_TIMED_OUT
            elif tp in self.refuse:
                error = common_pb2.NOT_LEADER_OR_FOLLOWER
            result.partitions.add(topic=tp[0], partition=tp[1], error=error)
        return response


@dataclass
class Topic:
    partitions: list[int]


class Routes:
    """The registry's routes as the writer reads them: each topic's partitions led by the
    node `leaders` names (changed by the tests, as a leader election changes it)."""

    def __init__(self, addresses: dict[int, str], leaders: dict[str, int]) -> None:
        self.addresses = addresses
        self.leaders = leaders
        self.topics = {topic: Topic([0, 1]) for topic in leaders}

    def route(self, topic: str, partition: int) -> Route:
        leader = self.leaders[topic]
        return Route(topic, partition, leader, 1, self.addresses[leader], True)


@pytest.fixture
def nodes():
    servers, servicers, addresses = [], {}, {}
    for node_id in (1, 2):
        servicer = HoldingNode()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        storage_pb2_grpc.add_StorageNodeServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        servicers[node_id] = servicer
        addresses[node_id] = f"127.0.0.1:{port}"
    yield servicers, addresses
    for servicer in servicers.values():
        servicer.release.set()
    for server in servers:
        server.stop(0)


def completion(tid: str, topic: str) -> Completion:
    return Completion(tid, 10 + len(tid), 0, True, 1, frozenset({(topic, 0), (topic, 1)}))


def test_markers_of_two_transactions_on_two_leaders_go_out_at_once(nodes):
    servicers, addresses = nodes
    routes = Routes(addresses, {"a": 1, "b": 2})
    completed: list[Completion] = []
    connections = NodeConnections()
    writer = MarkerWriter(routes, connections, completed.append)  # type: ignore[arg-type]
    first, second = completion("t1", "a"), completion("t2", "b")
    try:
        writer.submit(first)
        writer.submit(second)
        # Each node holds its call until the other node has one too: a writer sending one
        # transaction after the other would keep the first call held HOLD_S, then fail it.
        assert wait_until(lambda: servicers[1].arrived and servicers[2].arrived, HOLD_S / 2)
        for servicer in servicers.values():
            servicer.release.set()
        assert wait_until(lambda: len(completed) == 2, 10)
    finally:
        writer.stop()
        connections.close()
    assert set(completed) == {first, second}
    assert [p for _, p in servicers[1].arrived] == [[("a", 0), ("a", 1)]]
    assert [p for _, p in servicers[2].arrived] == [[("b", 0), ("b", 1)]]


def test_one_transaction_s_calls_to_two_leaders_go_out_at_once(nodes):
    servicers, addresses = nodes
    routes = Routes(addresses, {"a": 1, "b": 2})
    completed: list[Completion] = []
    connections = NodeConnections()
    writer = MarkerWriter(routes, connections, completed.append)  # type: ignore[arg-type]
    both = Completion("t", 7, 0, False, 1, frozenset({("a", 0), ("b", 1)}))
    try:
        writer.submit(both)
        assert wait_until(lambda: servicers[1].arrived and servicers[2].arrived, HOLD_S / 2)
        for servicer in servicers.values():
            servicer.release.set()
        assert wait_until(lambda: completed == [both], 10)
    finally:
        writer.stop()
        connections.close()
    assert writer.requests_sent == 2


def test_a_marker_refused_by_a_moved_leader_goes_to_the_new_one_on_the_change(nodes):
    """The retry backoff is set far beyond the bound: only the registry's report of the
    leader change can send the marker again in time."""
    servicers, addresses = nodes
    for servicer in servicers.values():
        servicer.release.set()
    servicers[1].refuse = {("a", 0), ("a", 1)}  # node 1 lost its leadership of topic a
    routes = Routes(addresses, {"a": 1})
    completed: list[Completion] = []
    connections = NodeConnections()
    writer = MarkerWriter(
        routes,  # type: ignore[arg-type]
        connections,
        completed.append,
        first_backoff_s=60.0,
        max_backoff_s=60.0,
    )
    moved = completion("t", "a")
    try:
        writer.submit(moved)
        assert wait_until(lambda: servicers[1].arrived, 10)
        assert wait_until(lambda: writer.pending() == [moved] and not writer._sending, 10)
        routes.leaders["a"] = 2  # the election, then the registry's report of it
        changed_at = time.monotonic()
        writer.leaders_changed([("a", 0), ("other", 3)])
        assert wait_until(lambda: completed == [moved], 2.0)
        took_s = time.monotonic() - changed_at
    finally:
        writer.stop()
        connections.close()
    assert took_s < 2.0
    assert [p for _, p in servicers[2].arrived] == [[("a", 0), ("a", 1)]]
    assert writer.pending_ids() == set()


def test_a_change_of_other_partitions_leaves_a_retry_to_its_backoff(nodes):
    servicers, addresses = nodes
    for servicer in servicers.values():
        servicer.release.set()
    servicers[1].refuse = {("a", 0)}
    routes = Routes(addresses, {"a": 1})
    connections = NodeConnections()
    writer = MarkerWriter(
        routes,  # type: ignore[arg-type]
        connections,
        lambda c: None,
        first_backoff_s=60.0,
        max_backoff_s=60.0,
    )
    try:
        writer.submit(completion("t", "a"))
        assert wait_until(lambda: servicers[1].arrived and not writer._sending, 10)
        writer.leaders_changed([("b", 0), ("a", 1)])  # a-1's marker landed already
        assert not wait_until(lambda: len(servicers[1].arrived) > 1, 0.5)
    finally:
        writer.stop()
        connections.close()


def test_the_registry_s_report_of_a_leader_change_reaches_the_marker_writer(nodes, tmp_path):
    """The transactions core listens to the gateway's registry: a controlled shutdown of the
    leader that refused a marker (its leadership moved to the other replica) sends it to
    the new leader at once, the backoff set far beyond the bound."""
    servicers, addresses = nodes
    for servicer in servicers.values():
        servicer.release.set()
    registry = Registry(tmp_path / "gateway", session_timeout_ms=60_000)
    for node_id, address in addresses.items():
        registry.register_node(node_id, address)
    registry.create_topic("a", 1, 2, {})
    first_leader = registry.route("a", 0).leader
    servicers[first_leader].refuse = {("a", 0)}
    servicers[3 - first_leader].refuse = set()
    connections = NodeConnections()
    core = TransactionsCore(
        registry,
        connections,
        Authorization([], enabled=False),
        create_topic=lambda name, partitions, configs: None,
        allocate_producer_id=lambda: 1,
        offsets_partition_for=lambda group: 0,
        coordination=SoleCoordinator(),
    )
    completed: list[Completion] = []
    writer = core.markers
    writer.on_complete = completed.append
    writer.first_backoff_s = writer.max_backoff_s = 60.0
    marker = Completion("t", 5, 0, True, 1, frozenset({("a", 0)}))
    try:
        writer.submit(marker)
        assert wait_until(lambda: servicers[first_leader].arrived and not writer._sending, 10)
        changed_at = time.monotonic()
        registry.controlled_shutdown(first_leader)
        assert registry.route("a", 0).leader == 3 - first_leader
        assert wait_until(lambda: completed == [marker], 2.0)
        took_s = time.monotonic() - changed_at
    finally:
        core.stop()
        connections.close()
    assert took_s < 2.0
    assert [p for _, p in servicers[3 - first_leader].arrived] == [[("a", 0)]]
