"""services/long_lived.py: what a server settles leaves the cyclic collector's view, a
removed partition is freed by reference counting alone (no cycle waits on a collection
that settled objects never get), and a node's applier and the gateway's registry settle the
partitions they create."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from seglog.records import RecordBatchBuilder
from seglog.storage.config import LogManagerConfig
from seglog.storage.log_manager import LogManager
from seglog.v1 import gateway_pb2
from services import long_lived
from services.gateway.cluster.metadata_file_store import FileMetadataStore
from services.gateway.cluster.registry import Registry
from services.storage_node.metadata_applier import MetadataApplier
from services.storage_node.partition import Registration
from services.storage_node.replica_manager import ReplicaManager

NODE_ID = 1
OTHER_NODE_ID = 2


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(LogManagerConfig(log_dirs=(str(tmp_path / "data"),)))
    manager = ReplicaManager(logs, node_id=NODE_ID)
    try:
        yield manager
    finally:
        manager.stop()
        logs.shutdown()


def tracked_ids() -> set[int]:
    """The objects the cyclic collector walks (settled ones are not among them)."""
    return {id(o) for o in gc.get_objects()}


def test_settle_does_nothing_outside_a_server_process() -> None:
    before = long_lived.settled_objects()
    long_lived.settle()
    assert long_lived.settled_objects() == before


def test_settled_objects_leave_the_collectors_view_and_garbage_does_not_stay(
    settling: None,
) -> None:
    class Node:
        other: object = None

    kept = Node()
    garbage, partner = Node(), Node()
    garbage.other, partner.other = partner, garbage  # a cycle: only a collection frees it
    gone = weakref.ref(garbage)
    del garbage, partner
    assert gone() is not None
    long_lived.settle()
    assert gone() is None  # collected before the survivors were settled, not kept forever
    assert id(kept) not in tracked_ids()
    assert long_lived.settled_objects() > 0
    made_after = Node()
    assert id(made_after) in tracked_ids()  # the next collections walk only what is new


def test_every_so_many_settles_a_cycle_that_died_after_its_settle_is_collected(
    settling: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(long_lived, "_settles", 0)

    class Node:
        other: object = None

    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    long_lived.settle()  # both settled while alive
    del first, second  # now a garbage cycle out of the collector's view
    for _ in range(long_lived.FULL_PASS_EVERY - 2):
        long_lived.settle()
        assert gone() is not None
    long_lived.settle()  # the FULL_PASS_EVERY-th
    assert gone() is None


def _batch(count: int) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(None, b"v%d" % i)
    return builder.build()


@pytest.mark.parametrize("leader", [NODE_ID, OTHER_NODE_ID], ids=["leader", "follower"])
def test_a_removed_partition_is_freed_without_a_collection(
    replicas: ReplicaManager, leader: int
) -> None:
    """Settled objects are never walked again: a partition whose removal left a cycle
    would stay in memory for good. Reference counting must free it all by itself."""
    both = (NODE_ID, OTHER_NODE_ID)
    for number in range(3):
        replicas.apply_state("t", number, {}, Registration(leader, 1, 1, both, both))
    if leader == NODE_ID:
        replicas.logs.get_log("t", 0).append(_batch(5), leader_epoch=1)
    held = [replicas.partition("t", n) for n in range(3)]
    refs = [weakref.ref(p) for p in held] + [weakref.ref(p.log) for p in held]
    del held
    gc.collect()
    gc.disable()
    try:
        for number in range(3):
            replicas.delete_partition("t", number)
        alive = [r() for r in refs if r() is not None]
        assert alive == []
    finally:
        gc.enable()


def _assignment(topic: str, count: int) -> gateway_pb2.NodeAssignment:
    return gateway_pb2.NodeAssignment(
        partitions=[
            gateway_pb2.AssignedPartition(
                topic=topic,
                partition=i,
                leader_epoch=1,
                leader=NODE_ID,
                replicas=[NODE_ID],
                isr=[NODE_ID],
                partition_epoch=1,
            )
            for i in range(count)
        ],
    )


def test_the_applier_settles_the_partitions_it_creates(
    settling: None, replicas: ReplicaManager
) -> None:
    applier = MetadataApplier(replicas)
    applier.start()
    try:
        ticket = applier.submit(_assignment("created", 20))
        assert applier.wait_applied(ticket, timeout_s=30)
        logs = [replicas.logs.get_log("created", n) for n in range(20)]
        tracked = tracked_ids()
        assert [log for log in logs if id(log) in tracked] == []
    finally:
        applier.stop()


def test_the_registry_settles_the_partitions_a_topic_creation_adds(
    settling: None, tmp_path: Path
) -> None:
    registry = Registry(tmp_path / "gateway", store=FileMetadataStore(tmp_path / "metadata"))
    for node in (1, 2, 3):
        registry.register_node(node, f"127.0.0.1:{node}")
    registry.create_topic("created", 12, 3, {})
    registry.create_partitions("created", 16)
    tracked = tracked_ids()
    partitions = registry.topic("created").partitions
    assert len(partitions) == 16
    assert [p for p in partitions if id(p) in tracked] == []
