"""The registry's stores: the JSON file, and etcd (a real etcd 3.5 on loopback) where every
write is a transaction comparing the revision the writer last saw, so a writer with stale
state writes nothing, and other gateways get each change by watch."""

from __future__ import annotations

import shutil
import threading

import pytest

from services.gateway.cluster.registry import Registry
from services.gateway.cluster.registry_store import (
    ControllerFencedError,
    EtcdRegistryStore,
    FileRegistryStore,
    StaleRegistryError,
)
from services.gateway.coordination.election import Fence
from services.gateway.coordination.etcd_keyspace import EtcdKeyspace
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.etcd import Etcd
from tests.waiting import wait_until


@pytest.fixture
def etcd(tmp_path):
    server = Etcd(tmp_path / "etcd")
    yield server
    server.stop()


def store_at(etcd, prefix):
    return EtcdRegistryStore(EtcdKeyspace(etcd.endpoint, prefix))


def test_the_file_store_keeps_the_state(tmp_path):
    store = FileRegistryStore(tmp_path / "registry.json")
    assert store.load() is None
    store.save({"version": 1, "topics": {}})
    assert FileRegistryStore(tmp_path / "registry.json").load() == {"version": 1, "topics": {}}


def test_a_writer_with_stale_state_writes_nothing(etcd):
    first = store_at(etcd, "/t1")
    second = store_at(etcd, "/t1")
    assert first.load() is None and second.load() is None
    first.save({"n": 1})
    with pytest.raises(StaleRegistryError):
        second.save({"n": 2})  # it read before the first wrote: fenced
    assert store_at(etcd, "/t1").load() == {"n": 1}
    assert second.load() == {"n": 1}
    second.save({"n": 3})  # having read the newer state, it may write
    with pytest.raises(StaleRegistryError):
        first.save({"n": 4})
    assert store_at(etcd, "/t1").load() == {"n": 3}
    # Another prefix is another registry.
    assert store_at(etcd, "/t2").load() is None


def test_other_writers_changes_arrive_by_watch(etcd):
    writer = store_at(etcd, "/w")
    reader = store_at(etcd, "/w")
    writer.load()
    reader.load()
    seen = []
    changed = threading.Event()

    def on_change(state, revision):
        seen.append(state)
        reader.revision = revision  # adopted, as the registry does under its lock
        changed.set()

    reader.watch(on_change)
    reader.keyspace.start_watch()
    try:
        writer.save({"n": 1})
        assert changed.wait(10)
        assert seen == [{"n": 1}]
        reader.save({"n": 2})  # its revision followed the watch: not stale
        assert writer.load() == {"n": 2}
    finally:
        reader.keyspace.close()


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
    store.save({"n": 1}, fence)  # the controller's decision lands
    keyspace.revoke(lease)  # its lease ends (paused, cut off): the key goes
    other = keyspace.create("controller", '{"address": "b"}', keyspace.grant(5))
    assert other is not None and other != elected
    with pytest.raises(ControllerFencedError):
        store.save({"n": 2}, fence)
    assert store_at(etcd, "/f").load() == {"n": 1}
    store.save({"n": 3})  # a requested change (no fence) still lands


def test_a_registry_on_etcd_keeps_its_topics_across_restarts(tmp_path, etcd):
    registry = Registry(tmp_path / "g1", store=store_at(etcd, "/r"))
    registry.register_node(1, "127.0.0.1:1")
    registry.create_topic("kept", 2, 1, {"retention.ms": "1000"})
    block = registry.allocate_producer_ids()
    again = Registry(tmp_path / "g2", store=store_at(etcd, "/r"))
    assert again.topic("kept").configs == {"retention.ms": "1000"}
    assert len(again.topic("kept").partitions) == 2
    assert again.allocate_producer_ids().start == block.stop  # no id handed out twice
    assert not (tmp_path / "g2" / "registry.json").exists()  # nothing on local disk


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
