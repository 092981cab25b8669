"""DeleteRecords (Kafka's KIP-107) through the gateway, on a three-node cluster with
replication factor 3: the leader's log start offset moves, the followers take it from their
fetches, whole segments below it go, reads below it get OFFSET_OUT_OF_RANGE, ListOffsets
EARLIEST answers it, and it holds across a node's restart."""

from __future__ import annotations

import pytest

from seglog.client.admin import EARLIEST, LATEST
from seglog.client.gateway import FetchPosition
from seglog.client.structs import TopicPartition
from seglog.errors import (
    OffsetOutOfRangeError,
    PolicyViolationError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.cluster import cli_in_process as run
from tests.waiting import wait_until

BATCHES = 10
RECORDS_PER_BATCH = 10
# Small segments: each holds a couple of batches, so a deletion leaves whole segments below
# the new log start offset for retention to remove.
TOPIC_CONFIGS = {"segment.bytes": "400", "file.delete.delay.ms": "0"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(
        tmp_path_factory.mktemp("delete-records"),
        nodes=3,
        node_configs={"retention.check.interval.ms": "100"},
    )
    yield c
    c.close()


def _topic_with_records(cluster, name: str) -> None:
    cluster.admin.create_topic(name, 1, 3, configs=TOPIC_CONFIGS)
    for i in range(BATCHES):
        values = [b"%s-%d-%d" % (name.encode(), i, j) for j in range(RECORDS_PER_BATCH)]
        (result,) = cluster.client.produce(name, {0: make_batch(values)}, acks=-1)
        assert result.error == common_pb2.NONE, result.error_message


def _replica_logs(cluster, name: str):
    return [node.logs.get_log(name, 0) for node in cluster.nodes.values()]


def test_deleting_records_moves_every_replicas_log_start_and_removes_old_segments(cluster):
    _topic_with_records(cluster, "trimmed")
    tp = TopicPartition("trimmed", 0)
    leader_log = cluster.log("trimmed", 0)
    segments_before = len(leader_log.segments)
    assert segments_before > 3
    assert cluster.admin.delete_records({tp: 45}) == {tp: 45}
    assert cluster.admin.list_offsets({tp: EARLIEST})[tp].offset == 45
    assert cluster.admin.list_offsets({tp: LATEST})[tp].offset == BATCHES * RECORDS_PER_BATCH
    assert wait_until(
        lambda: all(log.log_start_offset == 45 for log in _replica_logs(cluster, "trimmed"))
    )
    # Retention removes the segments wholly below 45, on every replica.
    assert wait_until(
        lambda: all(
            log.segments[1].base_offset > 45 and len(log.segments) < segments_before
            for log in _replica_logs(cluster, "trimmed")
        )
    )
    (below,) = cluster.client.fetch([FetchPosition("trimmed", 0, 10)], max_wait_ms=0)
    assert below.error == common_pb2.OFFSET_OUT_OF_RANGE
    # Reading from the new start returns the batch that holds offset 45, and what follows.
    fetched = list(cluster.client.fetch([FetchPosition("trimmed", 0, 45)], max_wait_ms=0))
    assert fetched and all(r.error == common_pb2.NONE for r in fetched)
    # Deleting below the current start changes nothing and answers the start.
    assert cluster.admin.delete_records({tp: 20}) == {tp: 45}


def test_minus_one_deletes_up_to_the_high_watermark_and_beyond_it_is_out_of_range(cluster):
    _topic_with_records(cluster, "emptied")
    tp = TopicPartition("emptied", 0)
    end = BATCHES * RECORDS_PER_BATCH
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        cluster.admin.delete_records({tp: end + 1})
    with pytest.raises(OffsetOutOfRangeError):
        cluster.admin.delete_records({tp: -2})
    assert cluster.log("emptied", 0).log_start_offset == 0  # nothing was changed
    assert cluster.admin.delete_records({tp: -1}) == {tp: end}
    assert cluster.admin.list_offsets({tp: EARLIEST})[tp].offset == end
    with pytest.raises(UnknownTopicOrPartitionError):
        cluster.admin.delete_records({TopicPartition("emptied", 5): 0})
    # The partition keeps taking records after the start it was emptied to.
    (result,) = cluster.client.produce("emptied", {0: make_batch([b"after"])}, acks=-1)
    assert result.base_offset == end


def test_the_log_start_offset_survives_a_node_restart(cluster):
    _topic_with_records(cluster, "durable")
    tp = TopicPartition("durable", 0)
    assert cluster.admin.delete_records({tp: 33}) == {tp: 33}
    assert wait_until(
        lambda: all(log.log_start_offset == 33 for log in _replica_logs(cluster, "durable"))
    )
    restarted = cluster.gateway.registry.route("durable", 0).leader
    cluster.stop_node(restarted, controlled=False)
    node = cluster.start_node(restarted)
    assert node.logs.get_log("durable", 0).log_start_offset == 33

    def earliest_is_33() -> bool:
        try:
            return cluster.admin.list_offsets({tp: EARLIEST})[tp].offset == 33
        except SeglogError as exc:
            # The leadership moving off the stopped node: the new leader may not know yet.
            if not exc.retriable:
                raise
            return False

    assert wait_until(earliest_is_33)


def test_the_records_command_deletes_every_partition_up_to_the_high_watermark(
    cluster, capsys, monkeypatch
):
    cluster.admin.create_topic("cli-trimmed", 2, 3)
    for partition in (0, 1):
        values = [b"v%d" % i for i in range(5 + partition)]
        (result,) = cluster.client.produce("cli-trimmed", {partition: make_batch(values)}, acks=-1)
        assert result.error == common_pb2.NONE
    code, out, _ = run(cluster, capsys, monkeypatch, "records", "delete", "--topic", "cli-trimmed")
    assert code == 0
    assert out.splitlines() == [
        "cli-trimmed-0: log start offset 5",
        "cli-trimmed-1: log start offset 6",
    ]
    code, out, err = run(
        cluster,
        capsys,
        monkeypatch,
        "records",
        "delete",
        "--topic",
        "cli-trimmed",
        "--partition",
        "0",
        "--offset",
        "9",
    )
    assert code == 1 and "OFFSET_OUT_OF_RANGE" in err


def test_a_compacted_topic_refuses_deleting_records_as_kafka_does(cluster):
    cluster.admin.create_topic("compacted", 1, 1, configs={"cleanup.policy": "compact"})
    keyed = make_batch([b"v1", b"v2"], keys=[b"k1", b"k2"])
    (result,) = cluster.client.produce("compacted", {0: keyed}, acks=-1)
    assert result.error == common_pb2.NONE
    with pytest.raises(PolicyViolationError, match="cleanup.policy is compact"):
        cluster.admin.delete_records({TopicPartition("compacted", 0): -1})
    assert cluster.log("compacted", 0).log_start_offset == 0
