"""Requests whose answers wait on others hold no thread of the Kafka listener (its later.py):
300 members waiting in JoinGroup across 30 groups while the gateway's thread count stays
small, then all answered; a member whose connection closes mid-join leaves its group, so the
rebalance goes on without it; a connection that pipelines fast requests behind a waiting
JoinGroup gets its answers in request order; a Metadata auto-creating a topic whose node does
not answer leaves the listener's only request handler to the other connections.

One in-process one-node cluster (its gateway's threads are this process's), raw sockets
speaking kafka-python's codec. A node is counted live for 60 s after its last heartbeat here,
so the auto-creation test can keep its node silent (a socket that never answers on its port)
while the registry still places replicas on it."""

from __future__ import annotations

import select
import socket
import threading

import pytest
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)

from services.gateway.kafka.apis import kafka_api_table
from services.gateway.kafka.listener import KafkaListener, ListenerLimits
from tests.cluster import LocalCluster
from tests.kafka_wire import SIZE, KafkaWire
from tests.waiting import wait_until

JOIN_VERSION = 3  # rebalance timeouts, and no MEMBER_ID_REQUIRED round trip
WAIT_MS = 60_000  # members' session and rebalance timeouts: longer than any test here
GROUPS, JOINERS = 30, 10
# Threads the gateway may start while 300 members wait: its request handlers (8) and a
# margin for lazily started pools; a thread per waiting member would be 300.
THREAD_GROWTH_MAX = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("answers-later"),
        nodes=1,
        session_timeout_ms=WAIT_MS,
        auto_create_topics_enable=True,
    )
    yield c
    c.close()


def join_request(group: str, member_id: str = "") -> JoinGroupRequest:
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(
        name="range", metadata=ConsumerProtocolSubscription(version=0, topics=["t"]).encode()
    )
    return JoinGroupRequest[JOIN_VERSION](
        group_id=group,
        session_timeout_ms=WAIT_MS,
        rebalance_timeout_ms=WAIT_MS,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[protocol],
    )


def send_join(wire: KafkaWire, group: str, member_id: str = "") -> None:
    wire.send_raw(wire.encode(join_request(group, member_id), JOIN_VERSION))


def read_join(wire: KafkaWire) -> JoinGroupResponse:
    frame = wire.read_frame()
    assert frame is not None, "the listener closed the connection"
    return wire.decode(frame, JOIN_VERSION, JoinGroupResponse)


# A coordinator still loading its __consumer_offsets partition (a fresh cluster's first
# joins) answers these; a client retries them, as this test's first joins do.
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE = 14, 15


def first_join(wire: KafkaWire, group: str) -> JoinGroupResponse:
    """A group's first member's join, tried again while its coordinator loads."""
    answers: list[JoinGroupResponse] = []

    def joined() -> bool:
        send_join(wire, group)
        answers.append(read_join(wire))
        return answers[-1].error_code not in (
            COORDINATOR_LOAD_IN_PROGRESS,
            COORDINATOR_NOT_AVAILABLE,
        )

    assert wait_until(joined, 30), answers[-1]
    return answers[-1]


def stable_leaders(address: str, groups: list[str]) -> list[tuple[KafkaWire, str, int]]:
    """Each group with one member, its leader, synced (Stable): (wire, member id,
    generation). A member joining such a group waits for the leader to join again."""
    wires = [KafkaWire(address) for _ in groups]
    leaders = []
    for wire, group in zip(wires, groups, strict=True):
        joined = first_join(wire, group)
        assert joined.error_code == 0 and joined.leader == joined.member_id
        sync = SyncGroupRequest[JOIN_VERSION](
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            assignments=[],
        )
        assert wire.request(sync, JOIN_VERSION, SyncGroupResponse).error_code == 0
        leaders.append((wire, joined.member_id, joined.generation_id))
    return leaders


def joining(cluster, group: str) -> int:
    snapshot = cluster.gateway.kafka_core.coordinator.snapshot(group)
    return 0 if snapshot is None else sum(m.joining for m in snapshot.members.values())


def members(cluster, group: str) -> set[str]:
    snapshot = cluster.gateway.kafka_core.coordinator.snapshot(group)
    return set() if snapshot is None else set(snapshot.members)


def readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def test_300_members_wait_in_joins_without_a_thread_each_and_are_all_answered(cluster):
    groups = [f"crowd-{i}" for i in range(GROUPS)]
    leaders = stable_leaders(cluster.kafka_address, groups)
    threads_before = threading.active_count()
    joiners: list[tuple[KafkaWire, str]] = []
    try:
        for group in groups:
            for _ in range(JOINERS):
                wire = KafkaWire(cluster.kafka_address)
                joiners.append((wire, group))
                send_join(wire, group)
        assert wait_until(lambda: all(joining(cluster, g) == JOINERS for g in groups), 30)
        grown = threading.active_count() - threads_before
        assert grown < THREAD_GROWTH_MAX, f"{grown} threads for {len(joiners)} waiting joins"
        assert not any(readable(wire.sock) for wire, _ in joiners)
        # The leaders join again: every group has all its members, and answers them all.
        for (wire, member_id, _), group in zip(leaders, groups, strict=True):
            send_join(wire, group, member_id)
        for wire, _, generation in leaders:
            joined = read_join(wire)
            assert (joined.error_code, joined.generation_id) == (0, generation + 1)
            assert len(joined.members) == JOINERS + 1
        for wire, _ in joiners:
            joined = read_join(wire)
            assert joined.error_code == 0 and joined.member_id
    finally:
        for wire, _ in joiners:
            wire.close()
        for wire, _, _ in leaders:
            wire.close()


def test_a_member_whose_connection_closes_mid_join_leaves_its_group(cluster):
    [(leader, leader_id, generation)] = stable_leaders(cluster.kafka_address, ["left-mid-join"])
    try:
        with KafkaWire(cluster.kafka_address) as gone:
            send_join(gone, "left-mid-join")
            assert wait_until(lambda: joining(cluster, "left-mid-join") == 1)
        # Gone before the rebalance ended: the group does not wait for it, nor keep it.
        assert wait_until(lambda: members(cluster, "left-mid-join") == {leader_id})
        send_join(leader, "left-mid-join", leader_id)
        joined = read_join(leader)
        assert (joined.error_code, joined.generation_id) == (0, generation + 1)
        assert [m.member_id for m in joined.members] == [leader_id]
    finally:
        leader.close()


def test_answers_keep_request_order_behind_a_waiting_join(cluster):
    [(leader, leader_id, _)] = stable_leaders(cluster.kafka_address, ["in-order"])
    try:
        with KafkaWire(cluster.kafka_address) as wire:
            requests = [
                (join_request("in-order"), JOIN_VERSION, JoinGroupResponse),
                (ApiVersionsRequest[0](), 0, ApiVersionsResponse),
                (MetadataRequest[1](topics=[]), 1, MetadataResponse),
            ]
            wire.send_raw(b"".join(wire.encode(r, v) for r, v, _ in requests))
            assert wait_until(lambda: joining(cluster, "in-order") == 1)
            send_join(leader, "in-order", leader_id)
            assert read_join(leader).error_code == 0
            for correlation_id, (_, version, response_class) in enumerate(requests, 1):
                frame = wire.read_frame()
                assert frame is not None and SIZE.unpack_from(frame)[0] == correlation_id
                answer = response_class.decode(frame, version=version, header=True)
                assert answer.error_code == 0
    finally:
        leader.close()


def test_a_metadata_waiting_on_a_new_topics_node_holds_no_request_handler(cluster):
    listener = KafkaListener(
        "127.0.0.1:0",
        kafka_api_table(),
        cluster.gateway.kafka_core,
        max_request_bytes=cluster.gateway.config.max_request_bytes,
        limits=ListenerLimits(num_io_threads=1),  # one handler: holding it holds everyone
    )
    listener.start()
    port = cluster.node_ports[1]
    cluster.stop_node(1, controlled=False)
    # The node's port taken by a socket that accepts and never answers: calls to the node
    # wait (the registry still counts it live for the minute of its session).
    silent = socket.create_server(("127.0.0.1", port))
    creator = KafkaWire(listener.address)
    try:
        creator.send_raw(
            creator.encode(
                MetadataRequest[4](
                    topics=[MetadataRequest.MetadataRequestTopic(name="made-on-a-silent-node")],
                    allow_auto_topic_creation=True,
                ),
                4,
            )
        )
        assert wait_until(lambda: "made-on-a-silent-node" in cluster.gateway.registry.topics)
        with KafkaWire(listener.address, timeout_s=5) as other:
            versions = other.request(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
            assert versions.error_code == 0
            described = other.request(MetadataRequest[1](topics=[]), 1, MetadataResponse)
            assert described.brokers
        assert not readable(creator.sock), "the node answered: nothing was waited for"
    finally:
        creator.close()
        silent.close()
        cluster.start_node(1)
        listener.stop()
