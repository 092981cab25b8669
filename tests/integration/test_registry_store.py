"""The registry's metadata log in etcd (a real etcd 3.5 on loopback): every batch is a
transaction comparing the head revision the writer's image is at, so a writer with stale
state writes nothing, a deposed controller's decision is fenced, other gateways apply each
batch by watch as a delta, no value grows with the cluster, and snapshots keep the history
bounded."""

from __future__ import annotations

import json
import shutil

import pytest

from services.gateway.cluster.metadata_etcd_store import (
    CHUNK_BYTES,
    LOG,
    SNAPSHOT,
    EtcdMetadataStore,
)
from services.gateway.cluster.metadata_records import node_record, producer_ids_record
from services.gateway.cluster.registry import Registry
from services.gateway.cluster.registry_store import ControllerFencedError, StaleRegistryError
from services.gateway.coordination.election import Fence
from services.gateway.coordination.etcd_keyspace import EtcdKeyspace
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.etcd import Etcd
from tests.waiting import wait_until

ETCD_VALUE_LIMIT_BYTES = 256 * 1024


@pytest.fixture
def etcd(tmp_path):
    server = Etcd(tmp_path / "etcd")
    yield server
    server.stop()


def store_at(etcd, prefix, **kwargs):
    return EtcdMetadataStore(EtcdKeyspace(etcd.endpoint, prefix), **kwargs)


def test_a_writer_with_stale_state_writes_nothing(etcd):
    first = store_at(etcd, "/t1")
    second = store_at(etcd, "/t1")
    assert first.load() == [] and second.load() == []
    offset = first.append([producer_ids_record(1)], 0)
    with pytest.raises(StaleRegistryError):
        second.append([producer_ids_record(2)], 0)  # it read before the first wrote
    assert store_at(etcd, "/t1").load() == [(offset, [producer_ids_record(1)])]
    assert second.load()[-1][0] == offset
    later = second.append([producer_ids_record(3)], offset)  # having read it, it may write
    with pytest.raises(StaleRegistryError):
        first.append([producer_ids_record(4)], offset)
    assert [b[1] for b in store_at(etcd, "/t1").load()] == [
        [producer_ids_record(1)],
        [producer_ids_record(3)],
    ]
    assert later > offset
    assert store_at(etcd, "/t2").load() == []  # another prefix is another registry


def test_a_deposed_controllers_decision_is_fenced(etcd):
    """A decision carrying an election's fence lands only while that election's key is the
    one etcd holds; once another gateway is elected it fails, as ControllerFencedError."""
    store = store_at(etcd, "/f")
    keyspace = store.keyspace
    store.load()
    lease = keyspace.grant(5)
    elected = keyspace.create("controller", '{"address": "a"}', lease)
    assert elected is not None
    fence = Fence("controller", elected)
    offset = store.append([producer_ids_record(1)], 0, fence)  # the decision lands
    keyspace.revoke(lease)  # its lease ends (paused, cut off): the key goes
    other = keyspace.create("controller", '{"address": "b"}', keyspace.grant(5))
    assert other is not None and other != elected
    with pytest.raises(ControllerFencedError):
        store.append([producer_ids_record(2)], offset, fence)
    assert [b[1] for b in store_at(etcd, "/f").load()] == [[producer_ids_record(1)]]
    store.append([producer_ids_record(3)], offset)  # a requested change (no fence) lands


def test_a_second_gateway_applies_the_firsts_records_as_deltas(tmp_path, etcd):
    first = Registry(tmp_path / "g1", store=store_at(etcd, "/d"), session_timeout_ms=60_000)
    first.register_node(1, "127.0.0.1:1")
    first.create_topic("t", 3, 1, {})
    second = Registry(tmp_path / "g2", store=store_at(etcd, "/d"), session_timeout_ms=60_000)
    second.store.keyspace.start_watch()
    try:
        before = second.metadata_offset
        assert before == first.metadata_offset
        seen = []
        second.listeners.append(seen.append)
        first.alter_topic_configs("t", {"retention.ms": "5"}, [])
        first.create_partitions("t", 4)
        assert wait_until(lambda: second.metadata_offset == first.metadata_offset)
        assert second.topic("t").configs == {"retention.ms": "5"}
        assert len(second.topic("t").partitions) == 4
        # Applied as deltas: its history answers a node at the earlier offset.
        view = second.node_view(1, before)
        assert not view.full
        assert sorted(i for _, i, _ in view.partitions) == [0, 1, 2, 3]
        assert seen == [[("t", 3)]]
        # Its image is current: its own write is not stale, and the first applies it.
        first.store.keyspace.start_watch()
        second.create_topic("u", 1, 1, {})
        assert wait_until(lambda: "u" in first.topics)
        assert first.metadata_offset == second.metadata_offset
    finally:
        second.store.keyspace.close()
        first.store.keyspace.close()


def _etcd_registry(tmp_path, etcd, prefix, partitions):
    registry = Registry(
        tmp_path / prefix,
        store=store_at(etcd, "/" + prefix),
        session_timeout_ms=60_000,
        max_partitions=20_000,
        max_partitions_per_topic=20_000,
    )
    for node_id in (1, 2, 3):
        registry.register_node(node_id, f"127.0.0.1:{node_id}")
    registry.create_topic("t", partitions, 3, {})
    created_bytes = registry.store.last_write_bytes
    p = registry.topic("t").partitions[7]
    registry.alter_partition(p.leader, "t", 7, p.leader_epoch, p.partition_epoch, [p.leader])
    return registry, created_bytes, registry.store.last_write_bytes


def test_no_value_grows_with_the_cluster_and_a_change_costs_the_same(tmp_path, etcd):
    small, small_created, small_change = _etcd_registry(tmp_path, etcd, "small", 1_000)
    large, large_created, large_change = _etcd_registry(tmp_path, etcd, "large", 10_000)
    _, kvs = large.store.keyspace.range("metadata/", prefix=True)
    assert max(len(kv.value) for kv in kvs) <= ETCD_VALUE_LIMIT_BYTES
    assert len([kv for kv in kvs if kv.key.startswith(LOG)]) > 1  # chunked, one revision
    assert (
        len({kv.mod_revision for kv in kvs if kv.key.startswith(LOG + "00000000000000000004")}) == 1
    )
    assert large_created > small_created
    # One ISR change: the same few hundred bytes at either size.
    assert small_change <= 1024 and large_change <= 1024
    assert abs(large_change - small_change) <= 16
    again = Registry(tmp_path / "again", store=store_at(etcd, "/large"))
    assert len(again.topic("t").partitions) == 10_000
    assert again.topic("t").partitions[7].isr == large.topic("t").partitions[7].isr
    assert CHUNK_BYTES < ETCD_VALUE_LIMIT_BYTES


def test_snapshots_keep_the_history_in_etcd_bounded(tmp_path, etcd):
    registry = Registry(tmp_path / "g", store=store_at(etcd, "/s", snapshot_interval_records=5))
    registry.register_node(1, "127.0.0.1:1")
    for i in range(6):
        registry.create_topic(f"t{i}", 2, 1, {})
    _, kvs = registry.store.keyspace.range("metadata/", prefix=True)
    log_batches = {kv.key.split("/")[2] for kv in kvs if kv.key.startswith(LOG)}
    snapshots = {kv.key.split("/")[2] for kv in kvs if kv.key.startswith(SNAPSHOT)}
    assert len(snapshots) == 1 and len(log_batches) <= 2  # older batches deleted
    again = Registry(tmp_path / "again", store=store_at(etcd, "/s"))
    assert sorted(again.topics) == [f"t{i}" for i in range(6)]
    assert again.metadata_offset == registry.metadata_offset


def test_the_former_registry_document_in_etcd_is_migrated(tmp_path, etcd):
    keyspace = EtcdKeyspace(etcd.endpoint, "/m")
    document = {
        "version": 1,
        "nodes": {"1": {"address": "127.0.0.1:1"}},
        "topics": {
            "old": {
                "replication_factor": 1,
                "configs": {},
                "partitions": [{"replicas": [1], "leader": 1}],
            }
        },
    }
    keyspace.put("registry", json.dumps(document))
    registry = Registry(tmp_path / "g", store=store_at(etcd, "/m"))
    assert registry.topic("old").partitions[0].replicas == [1]
    assert registry.store.load()[0][1][0] == node_record(1, "127.0.0.1:1")


def test_a_registry_on_etcd_keeps_its_topics_across_restarts(tmp_path, etcd):
    registry = Registry(tmp_path / "g1", store=store_at(etcd, "/r"))
    registry.register_node(1, "127.0.0.1:1")
    registry.create_topic("kept", 2, 1, {"retention.ms": "1000"})
    block = registry.allocate_producer_ids()
    again = Registry(tmp_path / "g2", store=store_at(etcd, "/r"))
    assert again.topic("kept").configs == {"retention.ms": "1000"}
    assert len(again.topic("kept").partitions) == 2
    assert again.allocate_producer_ids().start == block.stop  # no id handed out twice
    assert not (tmp_path / "g2" / "metadata").exists()  # nothing on local disk


def test_a_gateway_with_its_registry_in_etcd_survives_losing_its_data_dir(tmp_path, etcd):
    """The registry lives in etcd: a gateway restarted with an empty data dir (a pod without
    a volume) routes the same topics to the same nodes."""
    cluster = LocalCluster(tmp_path / "c", nodes=1, registry_etcd=etcd.endpoint)
    try:
        cluster.admin.create_topic("durable", 2, 1)
        [result] = cluster.client.produce("durable", {1: make_batch([b"v"])})
        assert not result.error
        cluster.gateway.stop(grace_s=0)
        shutil.rmtree(cluster.root / "gateway")
        cluster.restart_gateway()
        assert len(cluster.admin.describe_topic("durable").partitions) == 2
        assert wait_until(
            lambda: not cluster.client.produce("durable", {1: make_batch([b"w"])})[0].error
        )
        ends = cluster.client.list_offsets("durable", {1: -1})
        assert ends[1].offset == 2
    finally:
        cluster.close()


def test_a_stale_writer_catches_up_by_deltas_and_decides_again(tmp_path, etcd):
    first = Registry(tmp_path / "g1", store=store_at(etcd, "/c"), session_timeout_ms=60_000)
    first.register_node(1, "127.0.0.1:1")
    second = Registry(tmp_path / "g2", store=store_at(etcd, "/c"), session_timeout_ms=60_000)
    before = second.metadata_offset
    first.create_topic("a", 2, 1, {})  # the second does not watch: its image is now stale
    second.create_topic("b", 1, 1, {})  # refused as stale, caught up, decided again
    assert sorted(second.topics) == ["a", "b"]
    view = second.node_view(1, before)  # caught up by deltas: its history reaches back
    assert not view.full
    assert sorted((t.name, i) for t, i, _ in view.partitions) == [("a", 0), ("a", 1), ("b", 0)]
    assert sorted(Registry(tmp_path / "g3", store=store_at(etcd, "/c")).topics) == ["a", "b"]


def test_a_move_under_way_is_kept_in_etcd_through_watches_snapshots_and_restarts(tmp_path, etcd):
    first = Registry(tmp_path / "g1", store=store_at(etcd, "/m", snapshot_interval_records=6))
    for node_id in (1, 2, 3):
        first.register_node(node_id, f"127.0.0.1:{node_id}")
    first.create_topic("t", 2, 2, {})
    second = Registry(tmp_path / "g2", store=store_at(etcd, "/m"))
    second.store.keyspace.start_watch()
    try:
        # Two replicas to three: the third is being added (no node copies here, so the
        # move stays under way).
        first.alter_reassignments({("t", 0): [1, 2, 3], ("t", 1): [3, 2, 1]}, 7000)
        moving = {(t.name, i): p for t, i, p in first.reassignments()}
        assert sorted(moving) == [("t", 0), ("t", 1)]
        assert wait_until(lambda: second.metadata_offset == first.metadata_offset)
        assert {(t.name, i): p for t, i, p in second.reassignments()} == moving
        for i in range(4):  # a snapshot follows, then a restart reads it
            first.create_topic(f"more{i}", 1, 1, {})
        again = Registry(tmp_path / "g3", store=store_at(etcd, "/m"))
        assert {(t.name, i): p for t, i, p in again.reassignments()} == moving
        assert again.topic("t").partitions[1].throttle_bytes_per_s == 7000
        assert again.image.reassigning == {("t", 0), ("t", 1)}
    finally:
        second.store.keyspace.close()
