"""The registry's metadata log in a file (services/gateway/cluster/metadata_file_store.py):
batches appended and fsync'd, a torn tail cut at load, snapshots bounding the replay, and
the former registry.json migrated once; the deltas a node is told since its offset; and a
controller tick that does not walk an idle registry's partitions."""

from __future__ import annotations

import json

import pytest

from services.gateway.cluster.metadata_file_store import FileMetadataStore
from services.gateway.cluster.metadata_image import MetadataImage
from services.gateway.cluster.metadata_records import (
    MetadataRecordError,
    check_records,
    node_record,
    partition_record,
    producer_ids_record,
    topic_record,
)
from services.gateway.cluster.partition_changes import PartitionAssignment
from services.gateway.cluster.registry import Registry


def _store(tmp_path, **kwargs):
    return FileMetadataStore(tmp_path / "metadata", **kwargs)


def test_batches_are_appended_and_loaded_in_offset_order(tmp_path):
    store = _store(tmp_path)
    assert store.load() == []
    first = store.append([node_record(1, "a:1"), producer_ids_record(1000)], 0)
    second = store.append([node_record(2, "b:1")], first)
    assert (first, second) == (2, 3)  # offsets number the records
    again = _store(tmp_path)
    assert again.load() == [
        (2, [node_record(1, "a:1"), producer_ids_record(1000)]),
        (3, [node_record(2, "b:1")]),
    ]
    assert again.append([producer_ids_record(2000)], 3) == 4


def test_a_torn_tail_is_cut_at_load(tmp_path):
    store = _store(tmp_path)
    store.append([node_record(1, "a:1")], 0)
    store.append([node_record(2, "b:1")], 1)
    whole = store.log_path.stat().st_size
    with open(store.log_path, "r+b") as log:  # a crash in the middle of the last append
        log.truncate(whole - 5)
    again = _store(tmp_path)
    assert again.load() == [(1, [node_record(1, "a:1")])]
    assert again.log_path.stat().st_size < whole - 5  # the torn frame is gone
    assert again.append([node_record(3, "c:1")], 1) == 2
    assert _store(tmp_path).load() == [(1, [node_record(1, "a:1")]), (2, [node_record(3, "c:1")])]


def test_a_corrupt_frame_ends_the_log(tmp_path):
    store = _store(tmp_path)
    store.append([node_record(1, "a:1")], 0)
    store.append([node_record(2, "b:1")], 1)
    data = bytearray(store.log_path.read_bytes())
    data[-3] ^= 0xFF  # the last frame's CRC no longer matches
    store.log_path.write_bytes(bytes(data))
    assert _store(tmp_path).load() == [(1, [node_record(1, "a:1")])]


def test_a_malformed_record_is_refused_before_it_is_written(tmp_path):
    store = _store(tmp_path)
    with pytest.raises(MetadataRecordError):
        store.append([{"type": "node", "node_id": "one"}], 0)
    assert _store(tmp_path).load() == []


def test_a_registry_replays_one_snapshot_and_a_bounded_tail(tmp_path):
    registry = Registry(tmp_path, store=_store(tmp_path, snapshot_interval_records=10))
    registry.register_node(1, "127.0.0.1:1")
    registry.create_topic("a", 4, 1, {"retention.ms": "5"})  # 5 records: no snapshot yet
    registry.create_topic("b", 6, 1, {})  # the tail passes 10: a snapshot
    registry.alter_topic_configs("a", {"retention.ms": "7"}, [])
    store = _store(tmp_path)
    batches = store.load()
    assert len(batches) == 2  # the snapshot, then the one change after it
    snapshot_offset, snapshot = batches[0]
    assert {r["type"] for r in snapshot} == {
        "cluster",
        "node",
        "producer_ids",
        "topic",
        "partition",
    }
    assert batches[1][0] > snapshot_offset
    again = Registry(tmp_path, store=store)
    assert again.metadata_offset == registry.metadata_offset
    assert again.topic("a").configs == {"retention.ms": "7"}
    assert [len(again.topic(t).partitions) for t in ("a", "b")] == [4, 6]
    assert again.route("b", 5).address == "127.0.0.1:1"


def test_a_registry_keeps_everything_across_restarts(tmp_path):
    registry = Registry(tmp_path)
    registry.register_node(1, "127.0.0.1:1")
    registry.register_node(2, "127.0.0.1:2")
    registry.create_topic("t", 3, 2, {})
    registry.create_partitions("t", 5)
    block = registry.allocate_producer_ids()
    registry.delete_topic("t")
    registry.create_topic("u", 2, 2, {})
    again = Registry(tmp_path)
    assert sorted(again.topics) == ["u"]
    assert [p.replicas for p in again.topic("u").partitions] == [
        p.replicas for p in registry.topic("u").partitions
    ]
    assert again.allocate_producer_ids().start == block.stop
    assert again.image.hosted == registry.image.hosted


def test_an_existing_registry_json_becomes_the_first_snapshot(tmp_path):
    """A deployment from before the metadata log keeps its topics, nodes, ACLs and ids."""
    document = {
        "version": 1,
        "next_producer_id_block": 3000,
        "acls": [
            {
                "principal": "User:alice",
                "host": "*",
                "resource_type": "TOPIC",
                "pattern_type": "LITERAL",
                "resource_name": "orders",
                "operation": "READ",
                "permission": "ALLOW",
            }
        ],
        "nodes": {"1": {"address": "127.0.0.1:7101"}, "2": {"address": "127.0.0.1:7102"}},
        "topics": {
            "orders": {
                "replication_factor": 2,
                "configs": {"retention.ms": "60000"},
                "partitions": [
                    {"replicas": [1, 2], "leader": 1, "leader_epoch": 3},  # isr absent
                    {
                        "replicas": [2, 1],
                        "leader": 1,
                        "leader_epoch": 4,
                        "isr": [1],
                        "partition_epoch": 9,
                    },
                ],
            }
        },
    }
    (tmp_path / "registry.json").write_text(json.dumps(document))
    registry = Registry(tmp_path, session_timeout_ms=60_000)
    orders = registry.topic("orders")
    assert orders.configs == {"retention.ms": "60000"}
    assert [
        (p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch) for p in orders.partitions
    ] == [
        ([1, 2], 1, 3, [1, 2], 0),
        ([2, 1], 1, 4, [1], 9),
    ]
    assert registry.addresses() == {1: "127.0.0.1:7101", 2: "127.0.0.1:7102"}
    assert [a.principal for a in registry.acls] == ["User:alice"]
    assert registry.allocate_producer_ids().start == 3000
    assert (tmp_path / "metadata" / "snapshot.json").exists()
    # Read once: later changes live in the log, the old document is not read again.
    (tmp_path / "registry.json").write_text(json.dumps({**document, "topics": {}}))
    assert "orders" in Registry(tmp_path).topics


def test_changes_since_an_offset_name_the_nodes_partitions_and_removals(tmp_path):
    registry = Registry(tmp_path, session_timeout_ms=60_000)
    registry.register_node(1, "127.0.0.1:1")
    registry.register_node(2, "127.0.0.1:2")
    registry.create_topic("kept", 2, 2, {})
    registry.create_topic("gone", 2, 1, {})
    start = registry.metadata_offset
    assert registry.node_view(1, start).partitions == []  # nothing since: empty delta
    assert not registry.node_view(1, start).full
    registry.alter_topic_configs("kept", {"retention.ms": "9"}, [])
    hosted_gone = {
        n: {i for i, p in enumerate(registry.topic("gone").partitions) if n in p.replicas}
        for n in (1, 2)
    }
    registry.delete_topic("gone")
    for node_id in (1, 2):
        view = registry.node_view(node_id, start)
        assert not view.full and view.offset == registry.metadata_offset
        assert sorted((t.name, i) for t, i, _ in view.partitions) == [("kept", 0), ("kept", 1)]
        assert all(t.configs == {"retention.ms": "9"} for t, _, _ in view.partitions)
        assert view.removed == [("gone", i) for i in sorted(hosted_gone[node_id])]
    # Offset 0 (a node that has nothing), or one ahead of this registry: the whole
    # assignment.
    for since in (0, registry.metadata_offset + 100):
        view = registry.node_view(1, since)
        assert view.full and sorted((t.name, i) for t, i, _ in view.partitions) == [
            ("kept", 0),
            ("kept", 1),
        ]


def test_an_offset_older_than_the_retained_history_gets_everything(tmp_path):
    registry = Registry(tmp_path, session_timeout_ms=60_000)
    registry.register_node(1, "127.0.0.1:1")
    registry.create_topic("t", 4, 1, {})
    old = registry.metadata_offset
    registry.image.history.max_entries = 4
    for value in range(3):  # each config change records every partition of the topic
        registry.alter_topic_configs("t", {"retention.ms": str(value)}, [])
    assert registry.image.history.floor > old
    assert registry.node_view(1, old).full
    assert not registry.node_view(1, registry.metadata_offset).full
    restarted = Registry(tmp_path, session_timeout_ms=60_000)  # no history before its load
    assert restarted.node_view(1, old).full


def _idle_tick_examines(tmp_path, partitions):
    registry = Registry(
        tmp_path, session_timeout_ms=60_000, max_partitions=20_000, max_partitions_per_topic=20_000
    )
    for node_id in (1, 2, 3):
        registry.register_node(node_id, f"127.0.0.1:{node_id}")
    registry.create_topic("t", partitions, 3, {})
    examined_before = registry.partitions_examined
    for _ in range(10):
        assert registry.check_sessions() == []
    return registry.partitions_examined - examined_before


def test_an_idle_controller_tick_does_not_walk_the_partitions(tmp_path):
    assert _idle_tick_examines(tmp_path / "small", 10) == 0
    assert _idle_tick_examines(tmp_path / "large", 10_000) == 0


def test_a_dead_node_fails_over_in_one_batch_touching_only_its_partitions(tmp_path):
    registry = Registry(tmp_path, session_timeout_ms=60_000)
    for node_id in (1, 2, 3):
        registry.register_node(node_id, f"127.0.0.1:{node_id}")
    registry.create_topic("t", 30, 2, {})
    hosted = set(registry.image.hosted[3])
    registry.nodes[3].last_heartbeat = 0.0  # its session lapsed long ago
    offset = registry.metadata_offset
    examined_before = registry.partitions_examined
    changed = registry.check_sessions()
    assert registry.partitions_examined - examined_before == len(hosted)
    assert set(changed) == hosted
    assert registry.metadata_offset == offset + len(hosted)  # one batch of those records
    assert not registry.image.led.get(3) and 3 not in {
        r for tp in hosted for r in registry.image.partition(tp).isr
    }


def test_leaderless_partitions_are_looked_at_again_only_when_eligibility_changes(tmp_path):
    registry = Registry(tmp_path, session_timeout_ms=60_000)
    registry.register_node(1, "127.0.0.1:1")
    registry.create_topic("t", 3, 1, {})
    registry.controlled_shutdown(1)  # its only replica stops: nothing may lead
    assert len(registry.image.leaderless) == 3
    examined_before = registry.partitions_examined
    assert registry.check_sessions() == []
    # the image changed since the last look
    assert registry.partitions_examined - examined_before == 3
    for _ in range(5):
        assert registry.check_sessions() == []
    # nothing changed: not looked at again
    assert registry.partitions_examined - examined_before == 3
    registry.nodes[1].shutting_down = False  # as its etcd session says when it stays
    assert registry.check_sessions() == [("t", 0), ("t", 1), ("t", 2)]
    assert not registry.image.leaderless and registry.route("t", 0).leader == 1


def test_a_replica_moved_away_is_a_removal_for_its_old_node(tmp_path):
    image = MetadataImage.from_batches(
        [
            (
                2,
                [
                    topic_record("t", 1, {}, 1),
                    partition_record("t", 0, PartitionAssignment([1], 1).to_json()),
                ],
            )
        ]
    )
    image.apply(3, [partition_record("t", 0, PartitionAssignment([2], 2, 1).to_json())])
    assert image.history.since(1, 2).removed == {("t", 0)}
    assert image.history.since(2, 2).changed == {("t", 0)}
    assert image.hosted[2] == {("t", 0)} and not image.hosted[1]
    assert image.history.since(1, 1) is None  # before the image was loaded
    with pytest.raises(MetadataRecordError):
        image.apply(3, [])  # offsets only grow


def test_preferred_leader_election_looks_only_at_partitions_led_elsewhere(tmp_path):
    registry = Registry(tmp_path, session_timeout_ms=60_000)
    registry.register_node(1, "127.0.0.1:1")
    registry.register_node(2, "127.0.0.1:2")
    registry.create_topic("t", 10, 2, {})
    assert not registry.image.misled
    registry.controlled_shutdown(1)
    moved = sorted(registry.image.misled)
    assert moved and all(registry.image.partition(tp).leader == 2 for tp in moved)
    registry.register_node(1, "127.0.0.1:1")  # back, a follower until it is in sync again
    for topic, i in moved:
        p = registry.image.partition((topic, i))
        registry.alter_partition(2, topic, i, p.leader_epoch, p.partition_epoch, [1, 2])
    examined_before = registry.partitions_examined
    assert registry.rebalance_leaders() == moved
    assert registry.partitions_examined - examined_before == len(moved)
    assert not registry.image.misled


def test_a_decommissioned_node_stays_so_across_restarts_and_snapshots(tmp_path):
    registry = Registry(
        tmp_path, store=FileMetadataStore(tmp_path / "m", snapshot_interval_records=1)
    )
    for n in (1, 2, 3):
        registry.register_node(n, f"127.0.0.1:{n}")
    registry.set_decommissioned(3, True)
    registry.register_node(3, "127.0.0.1:3")  # a node record rewritten: the mark stays
    again = Registry(tmp_path, store=FileMetadataStore(tmp_path / "m"))
    assert again.image.decommissioned == {3}
    assert again.store.snapshot_path.exists()  # read back from a snapshot, too
    again.set_decommissioned(3, False)
    assert Registry(tmp_path, store=FileMetadataStore(tmp_path / "m")).image.decommissioned == set()
    with pytest.raises(MetadataRecordError, match="decommissioned"):
        check_records([{"type": "node_state", "node_id": 3, "decommissioned": "yes"}])
