"""Tiered storage's copy side (KIP-405) against a real S3 store (SeaweedFS) and real nodes: the
leader copies each rolled, committed segment with its indexes, producer snapshot and leader-
epoch checkpoint, records Kafka's remote segment metadata, lets local retention delete only
what was copied, applies the total retention to the remote segments, keeps every local segment
while the store is down, and a new leader continues from the metadata without copying again.

One store and one two-node cluster for the module; each test its own topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglog.client.gateway import FetchPosition
from seglog.storage.remote_layout import (
    LEADER_EPOCH_CHECKPOINT,
    OFFSET_INDEX,
    PRODUCER_SNAPSHOT,
    SEGMENT_FILES,
    SEGMENT_LOG,
    TIME_INDEX,
    TXN_INDEX,
    segment_object,
    segment_prefix,
)
from seglog.storage.remote_metadata import (
    COPY_SEGMENT_FINISHED,
    DELETE_SEGMENT_FINISHED,
    RemoteLogMetadata,
)
from seglog.storage.remote_store import RemoteStore
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.waiting import wait_for as _wait_for

PREFIX = "tiered-copy"
# Segments of a few batches each (a batch below is ~1.1 KiB): a test makes ten or so.
SEGMENT_BYTES = 3000
BASE_CONFIGS = {
    "segment.bytes": str(SEGMENT_BYTES),
    "remote.storage.enable": "true",
    "file.delete.delay.ms": "0",
}


# Conditions that ask the store poll every 0.2 s: the cluster runs in this process, and a
# boto3 call per 50 ms (the default) takes GIL time its heartbeats (100 ms) need.
STORE_POLL_S = 0.2


def wait_for(predicate, timeout_s, what, state=None):
    _wait_for(predicate, timeout_s, what, state, interval_s=STORE_POLL_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, seaweedfs):
    c = LocalCluster(
        tmp_path_factory.mktemp("tiered-copy"),
        nodes=2,
        node_configs={"retention.check.interval.ms": "100"},
        remote_storage=seaweedfs.storage_config(PREFIX),
        node_settings={
            "remote_log_manager_task_interval_ms": 200,
            "remote_log_manager_task_retry_backoff_ms": 100,
            "remote_log_manager_task_retry_backoff_max_ms": 400,
        },
    )
    yield c
    c.close()


@pytest.fixture
def store(seaweedfs):
    return RemoteStore(seaweedfs.storage_config(PREFIX))


def _produce(cluster, topic: str, batches: int, start: int = 0) -> None:
    for i in range(start, start + batches):
        values = [b"%s-%04d-%02d-" % (topic.encode(), i, j) + b"v" * 80 for j in range(10)]
        (result,) = cluster.client.produce(topic, {0: make_batch(values)}, acks=-1)
        assert result.error == common_pb2.NONE, result.error_message


def _topic(cluster, name: str, replicas: int = 1, **configs: str) -> str:
    cluster.admin.create_topic(name, 1, replicas, configs={**BASE_CONFIGS, **configs})

    def led() -> bool:
        held = cluster.leader_of(name, 0).replicas.partition_if_hosted(name, 0)
        return held is not None and held.is_leader

    wait_for(led, 15, f"{name} led")
    return cluster.leader_of(name, 0).logs.topic_id(name, 0)


def _metadata(store) -> RemoteLogMetadata:
    return RemoteLogMetadata(store, cache_ms=0)


def _rolled_ends(log) -> list[tuple[int, int]]:
    """(base, last offset) of each rolled local segment holding data."""
    segs = log.segments
    return [
        (s.base_offset, n.base_offset - 1) for s, n in zip(segs, segs[1:], strict=False) if s.size
    ]


def _copied_up_to(store, topic_id: str, end: int) -> bool:
    remote_end = _metadata(store).remote_end_offset(topic_id, 0)
    return remote_end is not None and remote_end >= end


def test_rolled_segments_are_copied_with_kafkas_layout_byte_for_byte(cluster, store):
    topic_id = _topic(cluster, "tiered-layout")
    _produce(cluster, "tiered-layout", 20)
    log = cluster.log("tiered-layout", 0)
    rolled = _rolled_ends(log)
    assert len(rolled) >= 4
    wait_for(lambda: _copied_up_to(store, topic_id, rolled[-1][1]), 20, "copies finished")
    segments = _metadata(store).segments(topic_id, 0)
    assert [(s.base_offset, s.end_offset) for s in segments] == rolled
    keys = set(store.list(f"tiered-layout-{topic_id}/"))
    entries = log.leader_epochs.entries
    for seg, local in zip(segments, log.segments, strict=False):
        assert seg.state == COPY_SEGMENT_FINISHED
        assert seg.topic == "tiered-layout" and seg.partition == 0
        assert seg.size_bytes == local.size
        assert seg.max_timestamp_ms == local.max_timestamp_so_far
        assert seg.leader_epochs == ((entries[0].epoch, seg.base_offset),)
        prefix = segment_prefix(seg.key)
        assert prefix == f"tiered-layout-{topic_id}/0/{seg.base_offset:020d}-{seg.segment_id}/"
        assert {prefix + name for name in SEGMENT_FILES} <= keys
        key = seg.key
        assert store.get(segment_object(key, SEGMENT_LOG)) == local.log.path.read_bytes()
        assert store.get(segment_object(key, OFFSET_INDEX)) == _bytes(local.offset_index.path)
        assert store.get(segment_object(key, TIME_INDEX)) == _bytes(local.time_index.path)
        assert store.get(segment_object(key, TXN_INDEX)) == _bytes(local.txn_index.path)
        snapshot = log.producer_state.snapshot_path(seg.end_offset + 1)
        assert store.get(segment_object(key, PRODUCER_SNAPSHOT)) == _bytes(snapshot)
        checkpoint = store.get(segment_object(key, LEADER_EPOCH_CHECKPOINT)).decode()
        assert checkpoint.splitlines() == ["0", "1", f"{entries[0].epoch} 0"]
    # The time index was really copied (a rolled segment's has its final entry at least).
    assert any(store.get(segment_object(s.key, TIME_INDEX)) for s in segments)
    # Nothing of the active segment, nor past the high watermark.
    assert all(s.end_offset < log.high_watermark for s in segments)
    assert segments[-1].end_offset == log.segments[-1].base_offset - 1


def _bytes(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def test_local_retention_deletes_copied_segments_only(cluster, store):
    topic_id = _topic(cluster, "tiered-local", **{"local.retention.bytes": "1"})
    _produce(cluster, "tiered-local", 20)
    log = cluster.log("tiered-local", 0)
    # Every rolled segment goes from the disk once copied: local.retention.bytes=1 keeps only
    # the active one, and the log start is where the copies end.
    wait_for(
        lambda: (
            len(log.segments) == 1
            and _copied_up_to(store, topic_id, log.segments[0].base_offset - 1)
        ),
        20,
        "copied segments deleted locally",
        lambda: f"{log.segments} remote end {_metadata(store).remote_end_offset(topic_id, 0)}",
    )
    segments = _metadata(store).segments(topic_id, 0)
    assert segments[0].base_offset == 0
    assert log.log_start_offset == segments[-1].end_offset + 1
    # Offsets are contiguous across the copies: nothing deleted was left uncopied.
    for before, after in zip(segments, segments[1:], strict=False):
        assert after.base_offset == before.end_offset + 1


def test_a_stopped_store_keeps_local_segments_until_copies_finish(cluster, store, seaweedfs):
    topic_id = _topic(cluster, "tiered-outage", **{"local.retention.bytes": "1"})
    leader = cluster.leader_of("tiered-outage", 0)
    manager = leader.remote_log_manager
    log = leader.logs.get_log("tiered-outage", 0)
    seaweedfs.kill()
    try:
        _produce(cluster, "tiered-outage", 20)  # the node keeps taking writes
        rolled = _rolled_ends(log)
        assert len(rolled) >= 4
        failures = manager.failures
        # Several passes fail, each after retention had its chance to delete.
        wait_for(lambda: manager.failures >= failures + 3, 20, "copies retried")
        retention_passes = leader.logs.retention_passes
        wait_for(lambda: leader.logs.retention_passes >= retention_passes + 3, 20, "retention")
        assert _rolled_ends(log) == rolled
        assert log.log_start_offset == 0
        # The copy lag (Kafka's RemoteCopyLagBytes/Segments) shows what waits for the store.
        wait_for(
            lambda: _copy_lag(leader, "tiered-outage")[1] >= len(rolled) - 1,
            5,
            "the copy lag counting the segments not copied",
            lambda: str(_copy_lag(leader, "tiered-outage")),
        )
        assert _copy_lag(leader, "tiered-outage")[0] > 0
        assert "object store" in manager.last_error
        # ...and serves reads of them.
        fetched = list(cluster.client.fetch([FetchPosition("tiered-outage", 0, 0)], max_wait_ms=0))
        assert fetched[0].error == common_pb2.NONE and fetched[0].records
    finally:
        seaweedfs.start()
    last = rolled[-1][1]
    wait_for(lambda: _copied_up_to(store, topic_id, last), 30, "copies caught up")
    wait_for(lambda: log.log_start_offset > last, 20, "local retention after the copies")
    segments = _metadata(store).segments(topic_id, 0)
    assert [(s.base_offset, s.end_offset) for s in segments][: len(rolled)] == rolled
    wait_for(lambda: _copy_lag(leader, "tiered-outage") == (0, 0), 20, "no copy lag left")


def _copy_lag(node, topic: str) -> tuple[int, int]:
    """The node's copy lag gauges for the topic's partition 0 (a snapshot <= 1 s old)."""
    [gauges] = [
        g for g in node.metrics.snapshot() if g.attributes["messaging.destination.name"] == topic
    ]
    return gauges.copy_lag_bytes, gauges.copy_lag_segments


def test_remote_retention_deletes_objects_and_moves_the_log_start(cluster, store):
    # About 1.1 KiB a batch, 2 batches a segment: 20 batches make ~10 segments of ~2.3 KiB;
    # retention.bytes 7000 keeps the newest two or three.
    topic_id = _topic(
        cluster,
        "tiered-expiry",
        **{"retention.bytes": "7000", "local.retention.bytes": "1"},
    )
    _produce(cluster, "tiered-expiry", 20)
    log = cluster.log("tiered-expiry", 0)
    metadata = _metadata(store)

    def settled() -> bool:
        """Every rolled segment copied, the oldest expired, the log start past them."""
        if not _copied_up_to(store, topic_id, log.segments[-1].base_offset - 1):
            return False
        start = metadata.log_start_offset(topic_id, 0)
        records = metadata.all_segments(topic_id, 0, fresh=True)
        expired = any(r.state == DELETE_SEGMENT_FINISHED for r in records)
        # Every rolled segment is copied, so no copy adds to the remote bytes any more: once
        # retention brought them within retention.bytes they stay there.
        remote_bytes = sum(r.size_bytes for r in metadata.segments(topic_id, 0))
        within = remote_bytes + log.segments[-1].size < 7000 + SEGMENT_BYTES
        return expired and within and start is not None and log.log_start_offset >= start > 0

    # Until the copies catch up, retention.bytes counts the local bytes not yet copied too
    # (as Kafka's): the remote segments may all go for a while.
    wait_for(settled, 20, "remote segments expired and the log start moved")
    # Retention goes on while this looks (the copier may still be catching up), so the reads
    # are ordered to be sound at any moment: segments deleted before the listing have no
    # objects in it; segments still kept after it had theirs in it (a segment's objects go
    # only after its DELETE_SEGMENT_STARTED record).
    records = metadata.all_segments(topic_id, 0, fresh=True)
    deleted = [r for r in records if r.state == DELETE_SEGMENT_FINISHED]
    keys = set(store.list(f"tiered-expiry-{topic_id}/"))
    kept = metadata.segments(topic_id, 0)
    assert deleted[0].base_offset == 0
    assert max(r.end_offset for r in deleted) < kept[0].base_offset
    # The objects are gone; the kept segments' are there.
    for r in deleted:
        assert not any(k.startswith(segment_prefix(r.key)) for k in keys)
    for r in kept:
        assert segment_object(r.key, SEGMENT_LOG) in keys
    # What stays is within retention.bytes (remote + local), less than one segment over.
    total = sum(r.size_bytes for r in kept) + log.segments[-1].size
    assert total < 7000 + SEGMENT_BYTES


def test_a_new_leader_continues_from_the_metadata_without_copying_again(cluster, store):
    topic_id = _topic(cluster, "tiered-handover", replicas=2)
    _produce(cluster, "tiered-handover", 12)
    first = cluster.leader_of("tiered-handover", 0)
    log = first.logs.get_log("tiered-handover", 0)
    copied_end = _rolled_ends(log)[-1][1]
    wait_for(lambda: _copied_up_to(store, topic_id, copied_end), 20, "first leader's copies")
    before = {r.segment_id: r for r in _metadata(store).all_segments(topic_id, 0)}
    first_id = first.config.node_id
    cluster.stop_node(first_id)
    try:
        wait_for(
            lambda: cluster.gateway.registry.route("tiered-handover", 0).leader != first_id,
            20,
            "leadership moved",
        )
        _produce(cluster, "tiered-handover", 12, start=12)
        second = cluster.leader_of("tiered-handover", 0)
        new_log = second.logs.get_log("tiered-handover", 0)
        new_end = _rolled_ends(new_log)[-1][1]
        wait_for(lambda: _copied_up_to(store, topic_id, new_end), 20, "new leader's copies")
    finally:
        cluster.start_node(first_id)
    after = _metadata(store).all_segments(topic_id, 0)
    # The first leader's copies are untouched, and no later copy is wholly below their end.
    for record in after:
        if record.segment_id in before:
            assert record == before[record.segment_id]
        else:
            assert record.end_offset > copied_end, record
            assert record.broker_id != first_id
    assert all(r.state == COPY_SEGMENT_FINISHED for r in after)
    assert len(after) > len(before)
    # The new leader's copies carry its epoch, from where its first batch is.
    first_epoch = max(e for r in before.values() for e, _ in r.leader_epochs)
    newest = max(after, key=lambda r: r.end_offset)
    assert max(e for e, _ in newest.leader_epochs) > first_epoch


def test_a_deleted_topics_objects_are_deleted(cluster, store):
    ids = {}
    for name in ("tiered-gone", "tiered-stays"):
        ids[name] = _topic(cluster, name, replicas=2)
        _produce(cluster, name, 10)
        end = _rolled_ends(cluster.log(name, 0))[-1][1]
        wait_for(lambda: _copied_up_to(store, ids[name], end), 20, f"{name} copied")  # noqa: B023
    kept = store.list(f"tiered-stays-{ids['tiered-stays']}/")
    assert store.list(f"tiered-gone-{ids['tiered-gone']}/") and kept
    cluster.admin.delete_topic("tiered-gone")
    wait_for(
        lambda: (
            not store.list(f"tiered-gone-{ids['tiered-gone']}/")
            and not store.list(f"__remote_log_metadata/{ids['tiered-gone']}/")
        ),
        20,
        "the deleted topic's objects deleted",
    )
    # Another topic's copies are untouched.
    assert store.list(f"tiered-stays-{ids['tiered-stays']}/") == kept
    assert _metadata(store).segments(ids["tiered-stays"], 0)


def test_a_deleted_topics_objects_are_deleted_after_a_restart_with_the_store_down(
    cluster, store, seaweedfs
):
    """The pending deletion is on the node's disk: deleted while the store is down, the
    topic's only replica restarted before the store is back still deletes its objects."""
    topic = "tiered-gone-later"
    topic_id = _topic(cluster, topic)
    _produce(cluster, topic, 10)
    end = _rolled_ends(cluster.log(topic, 0))[-1][1]
    wait_for(lambda: _copied_up_to(store, topic_id, end), 20, "copied")
    node_id = cluster.leader_of(topic, 0).config.node_id
    seaweedfs.kill()
    try:
        cluster.admin.delete_topic(topic)
        manager = cluster.nodes[node_id].remote_log_manager
        wait_for(lambda: manager.deletions.pending(), 20, "the deletion pending on the node")
        cluster.stop_node(node_id)
        cluster.start_node(node_id)
        assert [
            d.topic_id for d in cluster.nodes[node_id].remote_log_manager.deletions.pending()
        ] == [topic_id]
    finally:
        seaweedfs.start()
    wait_for(
        lambda: (
            not store.list(f"{topic}-{topic_id}/")
            and not store.list(f"__remote_log_metadata/{topic_id}/")
        ),
        30,
        "the deleted topic's objects deleted after the restart",
    )
    wait_for(
        lambda: not cluster.nodes[node_id].remote_log_manager.deletions.pending(),
        20,
        "nothing pending any more",
    )


def test_an_open_transaction_holds_copies_back_and_its_abort_is_copied(cluster, store):
    from seglog.records import RecordBatchBuilder
    from tests.txn_batches import ABORT, transactional_batch, write_marker

    topic_id = _topic(cluster, "tiered-txn")
    leader = cluster.leader_of("tiered-txn", 0)
    route = cluster.gateway.registry.route("tiered-txn", 0)
    stub = cluster.gateway.connections.get(route.leader, route.address).stub

    def append(records: bytes) -> None:
        request = common_pb2.ProduceRequest(topic="tiered-txn", acks=-1, timeout_ms=5000)
        request.partitions.add(partition=0, records=records)
        (result,) = stub.Append(request, timeout=10).partitions
        assert result.error == 0, result.error_message

    def plain(i: int) -> bytes:
        builder = RecordBatchBuilder()
        for j in range(10):
            builder.append(None, b"plain-%04d-%02d-" % (i, j) + b"v" * 80, None)
        return builder.build()

    append(transactional_batch(7001, [b"open" * 20]))  # offset 0: the LSO stays there
    for i in range(12):
        append(plain(i))
    log = leader.logs.get_log("tiered-txn", 0)
    rolled = _rolled_ends(log)
    assert len(rolled) >= 3 and log.last_stable_offset == 0
    passes = leader.remote_log_manager.passes
    wait_for(lambda: leader.remote_log_manager.passes >= passes + 3, 20, "copier passes")
    assert _metadata(store).segments(topic_id, 0) == []  # nothing at or past the LSO
    # The ABORT marker's entry goes to the active segment's .txnindex; more batches roll it.
    write_marker(stub, "tiered-txn", 0, 7001, ABORT)
    for i in range(12, 18):
        append(plain(i))
    end = _rolled_ends(log)[-1][1]
    wait_for(lambda: _copied_up_to(store, topic_id, end), 20, "copies after the abort")
    segments = _metadata(store).segments(topic_id, 0)
    copied = {s.base_offset: s for s in segments}
    indexes = []
    for local in log.segments[:-1]:
        remote = copied[local.base_offset]
        index = store.get(segment_object(remote.key, TXN_INDEX))
        assert index == _bytes(local.txn_index.path)
        indexes.append(index)
    assert any(indexes), "an aborted transaction's entry was copied"
