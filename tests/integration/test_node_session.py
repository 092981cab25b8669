"""A storage node's registry session against a scripted registry (tests/scripted_registry.py):
the session itself — a lapse and the answer ending it, pushes answered once applied, a
heartbeat refused at the gateway's call limit, a controlled shutdown whose gateway is gone.
(What the node does with the assignments it is given: test_node_assignments.py.)"""

from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest

from seglog.v1 import gateway_pb2, storage_pb2_grpc
from services.storage_node.server import StorageNode
from services.storage_node.settings import NodeConfig
from tests.scripted_registry import (
    HEARTBEAT_MS,
    NODE_ID,
    ScriptedRegistry,
    assignment,
    start_node,
    states,
)
from tests.waiting import wait_for, wait_until


@pytest.fixture
def registry():
    scripted = ScriptedRegistry()
    yield scripted
    scripted.server.stop(0)


@pytest.fixture
def stopping():
    nodes: list[StorageNode] = []
    yield nodes
    for node in nodes:
        node.stop(grace_s=0, controlled=False)


def test_a_lapsed_node_unfences_only_once_the_answer_ending_the_lapse_is_applied(
    tmp_path, registry, stopping, caplog
):
    caplog.set_level(logging.WARNING)
    node = start_node(tmp_path, registry, session_timeout_ms=500)
    stopping.append(node)
    registry.refusing.set()
    wait_for(lambda: node.replicas.fenced is not None, 15, "the node fenced after a lapse")
    many = 300
    registry.answer = lambda heartbeat: assignment(states("after", many), offset=5, full=True)
    seen: list[tuple[bool, int]] = []  # (fenced, partitions hosted)
    registry.refusing.clear()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        # Fenced first: a node seen unfenced had every partition before it unfenced.
        fenced = node.replicas.fenced is not None
        hosted = len(node.replicas.logs.logs())
        seen.append((fenced, hosted))
        if not fenced:
            break
        time.sleep(0.005)
    assert seen[-1] == (False, many), seen[-5:]
    # The answer was being applied while the node stayed fenced (what this test is about)...
    assert any(fenced and 0 < hosted < many for fenced, hosted in seen)
    # ...and it served as leader only after every state was applied.
    assert all(fenced for fenced, hosted in seen if hosted < many)
    assert wait_until(lambda: node.replicas.partition("after", many - 1).is_leader)

    # A lapse is what an operator must see, unlike the fence every start begins under.
    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    assert any("is fenced (no heartbeat answered" in m for m in said()), said()
    # The lift is logged just after the flag clears (outside the session's lock).
    wait_for(lambda: any("is no longer fenced" in m for m in said()), 15, "the lift logged")
    assert not any("starting: not registered" in m for m in said()), said()


@pytest.mark.slow  # hundreds of partitions created (and closed at the end)
def test_a_push_answers_once_its_states_are_applied_and_a_large_one_within_its_deadline(
    tmp_path, registry, stopping
):
    """A large push answers before its caller's deadline while its states are still being
    applied. The creation is held at its first partition until the push has answered, so
    the answer cannot have waited for the states, whatever the machine's speed."""
    node = start_node(tmp_path, registry, session_timeout_ms=3000)
    stopping.append(node)
    registry.answer = lambda heartbeat: assignment([], offset=1)  # deltas: nothing changed
    with grpc.insecure_channel(node.address) as channel:
        stub = storage_pb2_grpc.StorageNodeStub(channel)
        stub.UpdatePartitions(gateway_pb2.NodeAssignment(partitions=states("one", 1)), timeout=10)
        # Applied when the push answers: the node leads it at once.
        assert node.replicas.partition("one", 0).is_leader
        creation_held = threading.Event()
        release = threading.Event()
        create_log = node.replicas.create_log

        def held_creation(topic, partition, configs, topic_id=""):
            if topic == "many" and not creation_held.is_set():
                creation_held.set()
                assert release.wait(60), "the push never answered"
            return create_log(topic, partition, configs, topic_id)

        node.replicas.create_log = held_creation
        many = 500
        try:
            # Answered (no DEADLINE_EXCEEDED) with the applier held in the push's creation.
            stub.UpdatePartitions(
                gateway_pb2.NodeAssignment(partitions=states("many", many)), timeout=3
            )
            assert len(node.replicas.hosted()) < many + 1
            assert creation_held.wait(30), "the push's creation under way"
        finally:
            release.set()
    wait_for(lambda: len(node.replicas.hosted()) == many + 1, 120, "the pushed partitions hosted")


def test_a_heartbeat_refused_at_the_gateways_call_limit_is_sent_again_soon(
    tmp_path, registry, stopping
):
    """A gateway at max.concurrent.requests refuses calls RESOURCE_EXHAUSTED unread; a node
    sending its next heartbeat only an interval later could lose its session behind a flood
    of client calls, so it tries again after a tenth of a second instead."""
    registry.refusal_code = grpc.StatusCode.RESOURCE_EXHAUSTED
    registry.refusing.set()
    node = StorageNode(
        NodeConfig(
            node_id=NODE_ID,
            data_dir=tmp_path / "node",
            gateway=f"127.0.0.1:{registry.port}",
            heartbeat_interval_ms=60_000,  # the next try one interval later would fail the wait
        )
    )
    node.start()
    stopping.append(node)
    assert wait_until(lambda: len(registry.received) >= 3, timeout_s=30), registry.received
    registry.refusing.clear()
    assert node.session is not None and node.session.registered.wait(30)


def test_a_controlled_shutdown_whose_gateway_is_gone_says_so_once(tmp_path, registry, caplog):
    # Ctrl-C on make run used to reach the gateway with the nodes: each node's controlled
    # shutdown then heartbeated every 50 ms into a refused connection until its timeout,
    # a warning each time (~18 a second). Said once now; the retries and timeout are as before.
    caplog.set_level(logging.WARNING)
    node = StorageNode(
        NodeConfig(
            node_id=NODE_ID,
            data_dir=tmp_path / "node",
            gateway=f"127.0.0.1:{registry.port}",
            heartbeat_interval_ms=HEARTBEAT_MS,
            controlled_shutdown_timeout_ms=1500,
        )
    )
    node.start()
    assert node.session is not None and node.session.registered.wait(15)
    registry.refusing.set()  # the gateway goes as the shutdown begins
    since = time.monotonic()
    node.stop(grace_s=0, controlled=True)
    retries = [r for r in registry.heartbeats_since(since) if r.heartbeat.want_shutdown]
    assert len(retries) >= 5, retries  # it kept asking until its timeout...
    said = [r.getMessage() for r in caplog.records]
    failed = [m for m in said if "heartbeat to the gateway failed" in m]
    assert len(failed) == 1, failed  # ...and said so once
    assert "controlled shutdown" in failed[0]
    assert any("controlled shutdown did not finish" in m for m in said)
