"""What a storage node does with the assignments its registry session brings, against a
scripted registry (tests/scripted_registry.py) and a real StorageNode: thousands of
partitions applied without losing the session, removals and partitions a whole assignment
does not name set aside (only on its own cluster's word, never on an older assignment), a role
change applied before the creations queued ahead of it."""

from __future__ import annotations

import os
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from seglog.v1 import gateway_pb2, storage_pb2, storage_pb2_grpc
from services.storage_node.partition_creator import CREATION_NICE_INCREMENT
from services.storage_node.server import StorageNode
from tests.scripted_registry import (
    CLUSTER_ID,
    NODE_ID,
    ScriptedRegistry,
    assignment,
    start_node,
    states,
)
from tests.waiting import wait_for


def _nice_of(task: Path) -> int | None:
    """A thread's nice value from /proc/<pid>/task/<tid>/stat (field 19; fields counted
    after the command name's closing parenthesis); None if it ended meanwhile."""
    try:
        text = (task / "stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[16])


def _lowered_threads(process_nice: int) -> set[int]:
    """This process's threads whose nice value is not the process's own."""
    return {
        int(task.name)
        for task in Path("/proc/self/task").iterdir()
        if _nice_of(task) not in (process_nice, None)
    }


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


@pytest.mark.slow  # hundreds of partitions created (and closed at the end)
def test_a_node_keeps_its_session_while_applying_thousands_of_partitions(
    tmp_path, registry, stopping, settling
):
    """The answer that creates 2,000 partitions takes seconds to apply; meanwhile the node
    heartbeats on time, is never fenced, never registers again, and its heartbeats report
    the offset received at once and the offset applied when done, without growing. The
    collector is a server's (`settling`): without it, CPython's own full collections walk
    the whole test run's heap (0.5 s alone, near a second late in a full run), a stall no
    node process has."""
    session_timeout_ms = 1500
    node = start_node(tmp_path, registry, session_timeout_ms)
    stopping.append(node)
    wait_for(lambda: node.session.heartbeats_sent >= 3, 10, "a few heartbeats")
    small = registry.received[-1].heartbeat.ByteSize()
    fenced_seen: list[str] = []
    watching = threading.Event()

    def watch_fencing() -> None:
        while not watching.is_set():
            if node.replicas.fenced is not None:
                fenced_seen.append(node.replicas.fenced)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch_fencing, daemon=True)
    watcher.start()
    many = 2000
    big = assignment(states("wide", many), offset=2, full=True)
    started = time.monotonic()
    registry.answer = lambda heartbeat: big
    try:
        wait_for(
            lambda: any(
                r.heartbeat.applied_metadata_offset == 2 for r in registry.heartbeats_since(started)
            ),
            120,
            "a heartbeat reporting the big answer applied",
        )
    finally:
        watching.set()
        watcher.join()
    applied_s = time.monotonic() - started
    during = registry.heartbeats_since(started)
    assert len(node.replicas.hosted()) == many
    assert fenced_seen == []
    assert {r.method for r in during} == {"Heartbeat"}  # no re-registration
    times = [started, *(r.at for r in during), started + applied_s]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < session_timeout_ms / 2000, (
        f"a heartbeat came {max(gaps):.2f} s after the one before"
    )
    # Received at once, applied when done: progress shows while it applies, heartbeat after
    # heartbeat (fewer would show nothing: the answer must then be made larger).
    in_progress = [
        r
        for r in during
        if r.heartbeat.metadata_offset == 2 and r.heartbeat.applied_metadata_offset < 2
    ]
    assert len(in_progress) >= 3, f"{len(in_progress)} heartbeats while it applied"
    assert all(r.heartbeat.applied_metadata_offset <= r.heartbeat.metadata_offset for r in during)
    # Liveness and progress only: the size does not grow with the partitions hosted.
    assert max(r.heartbeat.ByteSize() for r in during) <= small + 2
    assert node.applier.pending_partitions == 0


def test_removed_partitions_and_those_a_full_answer_does_not_name_are_set_aside(
    tmp_path, registry, stopping
):
    node = start_node(tmp_path, registry, session_timeout_ms=3000)
    stopping.append(node)
    data_dir = node.config.data_dir
    registry.answer = lambda heartbeat: assignment(
        states("kept", 1) + states("dropped", 1) + states("unnamed", 1), offset=2, full=True
    )
    wait_for(lambda: len(node.replicas.hosted()) == 3, 15, "three partitions hosted")
    # A delta names what changed: a partition it does not name stays; a removed one goes.
    registry.answer = lambda heartbeat: assignment([], offset=3, removed=[("dropped", 0)])
    wait_for(lambda: (data_dir / "dropped-0-stray").is_dir(), 15, "dropped-0 set aside")
    assert sorted(node.replicas.hosted()) == [("kept", 0), ("unnamed", 0)]
    # A full answer is the whole assignment: what it does not name goes.
    registry.answer = lambda heartbeat: assignment(states("kept", 1), offset=4, full=True)
    wait_for(lambda: (data_dir / "unnamed-0-stray").is_dir(), 15, "unnamed-0 set aside")
    assert node.replicas.hosted() == [("kept", 0)]
    assert (data_dir / "kept-0").is_dir()
    wait_for(
        lambda: registry.received[-1].heartbeat.applied_metadata_offset == 4,
        15,
        "offset 4 applied",
    )


def test_a_whole_assignment_older_than_what_the_node_received_sets_nothing_aside(
    tmp_path, registry, stopping
):
    """Several gateways on etcd: the one answering may not have watched the newest batch
    yet. Its whole assignment does not name a partition created since; that partition
    must stay, and the next delta (from the older offset) brings the node up to date."""
    node = start_node(tmp_path, registry, session_timeout_ms=3000)
    stopping.append(node)
    data_dir = node.config.data_dir
    registry.answer = lambda heartbeat: assignment(
        states("old", 1) + states("new", 1), offset=10, full=True
    )
    wait_for(lambda: len(node.replicas.hosted()) == 2, 15, "two partitions hosted")
    registry.answer = lambda heartbeat: assignment(states("old", 1), offset=7, full=True)
    wait_for(
        lambda: registry.received[-1].heartbeat.metadata_offset == 7,
        15,
        "the lagging gateway's offset taken",
    )
    registry.answer = lambda heartbeat: assignment([], offset=11)
    wait_for(
        lambda: registry.received[-1].heartbeat.applied_metadata_offset == 11,
        15,
        "offset 11 applied",
    )
    assert sorted(node.replicas.hosted()) == [("new", 0), ("old", 0)]
    assert not (data_dir / "new-0-stray").exists()


@pytest.mark.slow  # hundreds of partitions created (and closed at the end)
def test_a_role_change_is_applied_before_the_creations_queued_ahead_of_it(
    tmp_path, registry, stopping
):
    """A failover's push does not wait behind a large creation: states of partitions the
    node already hosts are applied first, and the push answers once its own are. The order
    is recorded as the applier applies states, with the creation held at its first partition
    until the push is queued, so no timing decides it."""
    # Threads an earlier test in this process left at another priority are not this node's.
    lowered_before = _lowered_threads(os.getpriority(os.PRIO_PROCESS, 0))
    node = start_node(tmp_path, registry, session_timeout_ms=3000)
    stopping.append(node)
    registry.answer = lambda heartbeat: assignment(states("hot", 1), offset=2, full=True)
    wait_for(lambda: node.replicas.registration("hot", 0) is not None, 15, "hot-0 hosted")
    applied: list[str] = []
    creation_held = threading.Event()
    release = threading.Event()
    apply_state = node.replicas.apply_state

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    niceness: dict[str, set[int]] = {"logs": set(), "roles": set()}
    creator_ids: set[int] = set()
    create_log = node.replicas.create_log

    def recording_creation(topic, partition, configs, topic_id=""):
        niceness["logs"].add(nice())
        creator_ids.add(threading.get_native_id())
        return create_log(topic, partition, configs, topic_id)

    def recording(topic, partition, configs, registration):
        niceness["roles"].add(nice())
        if topic == "bulk" and not creation_held.is_set():
            creation_held.set()
            assert release.wait(30), "the push was never queued"
        applied.append(f"{topic}@{registration.leader_epoch}")
        return apply_state(topic, partition, configs, registration)

    node.replicas.apply_state = recording
    node.replicas.create_log = recording_creation
    many = 500
    # One created partition is followed from node 2 (nobody answers there): its replica
    # fetcher's thread starts during the creations.
    followed = gateway_pb2.AssignedPartition(
        topic="bulk", partition=many, leader=2, replicas=[2, NODE_ID], isr=[2, NODE_ID]
    )
    big = assignment(states("hot", 1) + states("bulk", many) + [followed], offset=3, full=True)
    big.node_addresses[2] = "127.0.0.1:1"
    registry.answer = lambda heartbeat: big
    assert creation_held.wait(15), "the creation under way"
    moved = gateway_pb2.AssignedPartition(
        topic="hot", partition=0, leader=2, leader_epoch=1, replicas=[NODE_ID, 2], isr=[2]
    )
    # Released once the push is queued (pending partitions are counted before it already).
    push_queued, submit = threading.Event(), node.applier.submit

    def noting_the_push(answer):
        ticket = submit(answer)
        if moved in answer.partitions:
            push_queued.set()
        return ticket

    node.applier.submit = noting_the_push
    with (
        grpc.insecure_channel(node.address) as channel,
        futures.ThreadPoolExecutor(1) as pool,
    ):
        push = pool.submit(
            storage_pb2_grpc.StorageNodeStub(channel).UpdatePartitions,
            gateway_pb2.NodeAssignment(partitions=[moved]),
            timeout=30,
        )
        assert push_queued.wait(30), "the push was never queued"
        assert not push.done()  # its state waits for the applier, held in the creation
        release.set()
        push.result()
    assert node.replicas.registration("hot", 0).leader == 2
    wait_for(lambda: node.applier.pending_partitions == 0, 120, "the creation done")
    created_after = applied[applied.index("hot@1") :].count("bulk@0")
    assert created_after > many // 2, f"the push waited for {many - created_after} creations"
    assert node.replicas.registration("bulk", many).leader == 2
    assert node.replicas.registration("hot", 0).leader_epoch == 1  # the older state lost
    # The logs were created at a lower OS priority than the node; every role (the role
    # change too) was taken at the node's own, and no other thread, the replica fetcher
    # started meanwhile among them, inherited the lower one.
    node_nice = os.getpriority(os.PRIO_PROCESS, 0)
    assert niceness == {"logs": {node_nice + CREATION_NICE_INCREMENT}, "roles": {node_nice}}
    assert _lowered_threads(node_nice) - lowered_before <= creator_ids


def test_only_a_registry_of_the_nodes_own_cluster_sets_its_partitions_aside(
    tmp_path, registry, stopping
):
    """The node's data dir takes the registry's cluster id at its first answer. A whole
    assignment naming no cluster (a registry that cannot say which cluster it is) may not
    set aside what it omits, nor remove; a push from another cluster is refused whole; an
    answer from another cluster stops the node, both ids named, nothing set aside."""
    node = start_node(tmp_path, registry, session_timeout_ms=3000)
    stopping.append(node)
    data_dir = node.config.data_dir
    assert f"cluster.id={CLUSTER_ID}" in (data_dir / "meta.properties").read_text()
    registry.answer = lambda heartbeat: assignment(
        states("kept", 1) + states("omitted", 1), offset=2, full=True
    )
    wait_for(lambda: len(node.replicas.hosted()) == 2, 15, "two partitions hosted")

    nameless = assignment(states("kept", 1), offset=3, full=True, removed=[("kept", 0)])
    nameless.cluster_id = ""
    registry.answer = lambda heartbeat: nameless
    wait_for(
        lambda: registry.received[-1].heartbeat.applied_metadata_offset == 3,
        15,
        "offset 3 applied",
    )
    assert sorted(node.replicas.hosted()) == [("kept", 0), ("omitted", 0)]

    other = "QI6iTG_UmjDqGHxcATqzmA"
    push = gateway_pb2.NodeAssignment(cluster_id=other)
    push.removed.add(topic="kept", partition=0)
    with grpc.insecure_channel(node.address) as channel:
        stub = storage_pb2_grpc.StorageNodeStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.UpdatePartitions(push, timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        deletion = storage_pb2.DeletePartitionRequest(topic="kept", partition=0, cluster_id=other)
        with pytest.raises(grpc.RpcError) as refused:
            stub.DeletePartition(deletion, timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert sorted(node.replicas.hosted()) == [("kept", 0), ("omitted", 0)]

    foreign = assignment([], offset=4, full=True)
    foreign.cluster_id = other
    registry.answer = lambda heartbeat: foreign
    assert node.fatal.wait(15), "an answer of another cluster must stop the node"
    assert CLUSTER_ID in node.failure and other in node.failure
    assert sorted(node.replicas.hosted()) == [("kept", 0), ("omitted", 0)]
    assert sorted(p.name for p in data_dir.iterdir() if p.is_dir()) == ["kept-0", "omitted-0"]
    assert f"cluster.id={CLUSTER_ID}" in (data_dir / "meta.properties").read_text()
