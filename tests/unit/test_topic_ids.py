"""Topic ids (KIP-516) in the engine and the metadata image: `partition.metadata` as Kafka
writes and reads it, a log of another topic id set aside rather than served, a log from
before ids adopting one, and the image keeping each topic's id for good."""

from __future__ import annotations

import json

import pytest

from seglog.storage import LogConfig, ManualClock, partition_metadata
from seglog.storage.config import LogManagerConfig
from seglog.storage.log_manager import LogManager
from seglog.storage.meta_properties import random_uuid
from seglog.storage.partition_metadata import PartitionMetadataError
from seglog.v1 import gateway_pb2
from services.gateway.cluster.metadata_image import MetadataImage
from services.gateway.cluster.metadata_records import (
    MetadataRecordError,
    check_records,
    partition_record,
    remove_topic_record,
    topic_record,
)
from services.storage_node.metadata_applier import MetadataApplier
from services.storage_node.replica_manager import ReplicaManager
from tests.batches import make_batch

CLOCK = ManualClock()


def manager(tmp_path) -> LogManager:
    config = LogManagerConfig(log_dirs=(str(tmp_path / "data"),))
    return LogManager(config, LogConfig(), clock=CLOCK)


def a_batch(value: bytes) -> bytes:
    return make_batch([value], timestamp_ms=CLOCK.now_ms())


# -- partition.metadata ------------------------------------------------------------------


def test_the_file_is_kafkas_two_lines_and_reads_back(tmp_path):
    topic_id = random_uuid()
    partition_metadata.write(tmp_path, topic_id)
    # PartitionMetadata.encode: "version: 0\ntopic_id: <id>", no final line end.
    assert (tmp_path / "partition.metadata").read_bytes() == (
        b"version: 0\ntopic_id: " + topic_id.encode()
    )
    assert not (tmp_path / "partition.metadata.tmp").exists()
    assert partition_metadata.read(tmp_path) == topic_id
    assert partition_metadata.read(tmp_path / "absent") == ""
    (tmp_path / "partition.metadata").write_bytes(b"")  # a power cut before its sync
    assert partition_metadata.read(tmp_path) == ""


@pytest.mark.parametrize(
    "content",
    [
        b"version: 0\n",
        b"topic_id: Vw0MOr7cTMqUabAmiOSm4g\nversion: 0",
        b"version: x\ntopic_id: Vw0MOr7cTMqUabAmiOSm4g",
        b"version: 0\ntopic_id: not-an-id",
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # Kafka's zero id: "none"
        b"version: 0\ntopic_id: " + b"A" * 5000,
        b"\xff\xfe",
    ],
)
def test_anything_else_is_an_error_naming_the_file(tmp_path, content):
    (tmp_path / "partition.metadata").write_bytes(content)
    with pytest.raises(PartitionMetadataError, match="partition.metadata"):
        partition_metadata.read(tmp_path)


def test_kafkas_reader_leniencies_are_kept(tmp_path):
    """A trailing line end and several spaces after the colon, as Kafka's `:\\s+` reads."""
    topic_id = random_uuid()
    (tmp_path / "partition.metadata").write_text(f"version:  0\ntopic_id:\t{topic_id}\n")
    assert partition_metadata.read(tmp_path) == topic_id


# -- the log manager ---------------------------------------------------------------------


def test_a_log_of_another_topic_id_is_set_aside_and_the_partition_starts_empty(tmp_path):
    old_id, new_id = random_uuid(), random_uuid()
    mgr = manager(tmp_path)
    mgr.startup()
    mgr.create_log("t", 0, topic_id=old_id).append(a_batch(b"old"))
    mgr.shutdown()
    mgr = manager(tmp_path)
    mgr.startup()
    assert mgr.topic_id("t", 0) == old_id
    assert mgr.create_log("t", 0, topic_id=old_id).log_end_offset == 1  # the same topic
    fresh = mgr.create_log("t", 0, topic_id=new_id)
    assert (fresh.log_start_offset, fresh.log_end_offset) == (0, 0)
    assert mgr.topic_id("t", 0) == new_id
    assert partition_metadata.read(fresh.directory) == new_id
    aside = tmp_path / "data" / "t-0-stray"
    assert partition_metadata.read(aside) == old_id
    assert any(aside.glob("*.log"))
    mgr.shutdown()


def test_a_log_from_before_ids_adopts_the_first_id_it_is_asked_for(tmp_path):
    topic_id = random_uuid()
    mgr = manager(tmp_path)
    mgr.startup()
    mgr.create_log("t", 0).append(a_batch(b"kept"))
    assert mgr.topic_id("t", 0) == ""
    assert not (mgr.get_log("t", 0).directory / "partition.metadata").exists()
    log = mgr.create_log("t", 0, topic_id=topic_id)
    assert log.log_end_offset == 1
    assert partition_metadata.read(log.directory) == topic_id
    mgr.shutdown()


def test_an_unreadable_partition_metadata_takes_only_its_partition_offline(tmp_path):
    mgr = manager(tmp_path)
    mgr.startup()
    mgr.create_log("t", 0, topic_id=random_uuid())
    broken = mgr.create_log("t", 1, topic_id=random_uuid()).directory
    mgr.shutdown()
    (broken / "partition.metadata").write_bytes(b"garbage")
    mgr = manager(tmp_path)
    mgr.startup()
    assert set(mgr.logs()) == {("t", 0)}
    assert "partition.metadata" in mgr.offline()[("t", 1)]
    mgr.shutdown()


# -- the metadata image ------------------------------------------------------------------


def _topic(name: str, topic_id: str = "") -> list[dict]:
    registration = {
        "replicas": [1],
        "leader": 1,
        "leader_epoch": 0,
        "isr": [1],
        "partition_epoch": 0,
    }
    return [topic_record(name, 1, {}, 1, topic_id), partition_record(name, 0, registration)]


def test_the_image_keeps_ids_both_ways_and_in_its_snapshot():
    image = MetadataImage()
    first = random_uuid()
    image.apply(1, _topic("a", first))
    assert (image.topic_id_of("a"), image.topic_name_of(first)) == (first, "a")
    again = MetadataImage.from_batches([(1, image.records())])
    assert again.topic_name_of(first) == "a"
    image.apply(2, [remove_topic_record("a")])
    assert image.topic_name_of(first) == ""
    second = random_uuid()
    image.apply(3, _topic("a", second))
    assert (image.topic_id_of("a"), image.topic_name_of(first)) == (second, "")


def test_an_id_is_given_once_and_never_changed_or_shared():
    image = MetadataImage()
    image.apply(1, _topic("legacy"))
    assert image.topic_id_of("legacy") == ""
    given = random_uuid()
    image.apply(2, [topic_record("legacy", 1, {}, 1, given)])
    assert image.topic_name_of(given) == "legacy"
    image.apply(3, [topic_record("legacy", 1, {"retention.ms": "1"}, 1)])  # no id: kept
    assert image.topic_id_of("legacy") == given
    with pytest.raises(MetadataRecordError, match="never changes"):
        image.apply(4, [topic_record("legacy", 1, {}, 1, random_uuid())])
    with pytest.raises(MetadataRecordError, match="another topic"):
        image.apply(5, _topic("other", given))
    with pytest.raises(MetadataRecordError, match="topic_id"):
        check_records([{**topic_record("x", 1, {}, 1), "topic_id": "AAAAAAAAAAAAAAAAAAAAAA"}])
    with pytest.raises(MetadataRecordError, match="topic_id"):
        check_records([{**topic_record("x", 1, {}, 1), "topic_id": 7}])


# -- the node's applier ------------------------------------------------------------------


def _state(topic_id: str, leader_epoch: int) -> gateway_pb2.NodeAssignment:
    assignment = gateway_pb2.NodeAssignment()
    assignment.partitions.add(
        topic="t",
        partition=0,
        leader_epoch=leader_epoch,
        leader=1,
        replicas=[1],
        isr=[1],
        partition_epoch=leader_epoch,
        topic_id=topic_id,
    )
    return assignment


def test_a_hosted_partition_given_another_topic_id_starts_empty_whatever_the_epochs(tmp_path):
    """A node that slept through a delete and a creation of the same name (it gets only the
    new topic's state, at epoch 0, below the old one's) hosts the new topic, not the old."""
    logs = manager(tmp_path)
    logs.startup()
    replicas = ReplicaManager(logs, node_id=1)
    applier = MetadataApplier(replicas)
    applier.start()
    old_id, new_id = random_uuid(), random_uuid()
    try:
        assert applier.wait_applied(applier.submit(_state(old_id, 5)), timeout_s=30)
        replicas.partition("t", 0).log.append(a_batch(b"old"), leader_epoch=5)
        assert applier.wait_applied(applier.submit(_state(new_id, 0)), timeout_s=30)
        held = replicas.partition("t", 0)
        assert (held.leader_epoch, held.log.log_end_offset) == (0, 0)
        assert logs.topic_id("t", 0) == new_id
        assert partition_metadata.read(tmp_path / "data" / "t-0-stray") == old_id
        # The same topic's older state changes nothing (epochs decide again).
        assert applier.wait_applied(applier.submit(_state(new_id, 0)), timeout_s=30)
        assert replicas.partition("t", 0) is held
    finally:
        applier.stop()
        replicas.stop()
        logs.shutdown()


def test_nodes_are_told_the_id_given_to_a_topic_from_before_ids():
    """The id-giving record puts the topic's partitions in the change history, so their
    nodes' next heartbeat answers carry the states with the id (and the nodes write it)."""
    image = MetadataImage()
    image.apply(1, _topic("legacy"))
    image.apply(2, [topic_record("legacy", 1, {}, 1, random_uuid())])
    changes = image.history.since(1, 1)
    assert changes is not None and changes.changed == {("legacy", 0)}


def test_an_offline_partitions_directory_of_another_topic_is_set_aside_not_reopened(tmp_path):
    old_id = random_uuid()
    mgr = manager(tmp_path)
    mgr.startup()
    mgr.create_log("t", 0, topic_id=old_id).append(a_batch(b"old"))
    mgr.shutdown()
    # A config its log cannot open with: the partition comes back offline, its files unread.
    overrides = tmp_path / "data" / "topic-config-overrides.json"
    overrides.write_text(json.dumps({"t": {"retention.ms": "soon"}}))
    mgr = manager(tmp_path)
    mgr.startup()
    assert ("t", 0) in mgr.offline()
    fresh = mgr.create_log("t", 0, {"retention.ms": "1000"}, topic_id=random_uuid())
    assert fresh.log_end_offset == 0
    assert partition_metadata.read(tmp_path / "data" / "t-0-stray") == old_id
    mgr.shutdown()
