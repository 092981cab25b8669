"""The gateway and storage nodes' data path on real servers: produce and fetch keep batches
byte for byte across nodes, a bad or oversize request writes nothing, acks, stale leader
epochs, long polls and min bytes, fetches in bounded chunks, per-partition errors, and
ListOffsets. (Topics, nodes down and back, restarts and health: test_services_cluster.py.)"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from kafka.record.default_records import DefaultRecordBatch

from seglog.client.gateway import EARLIEST, LATEST, MAX_TIMESTAMP, FetchPosition
from seglog.errors import (
    CorruptRecordError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    NotLeaderError,
    RecordListTooLargeError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from seglog.records import iter_batches, iter_records
from seglog.rpc.status import error_from_rpc
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.gateway_calls import fetch_all, log_end_offsets, produce_raw
from tests.waiting import wait_until


def test_produce_and_fetch_across_nodes_keep_batches_byte_for_byte(cluster):
    cluster.admin.create_topic("orders", 6)
    placement = {cluster.gateway.registry.route("orders", p).leader for p in range(6)}
    assert placement == {1, 2, 3}  # balanced over the three nodes
    sent = {
        p: make_batch([b"p%d-%d" % (p, i) for i in range(5)], compression=p % 5) for p in range(6)
    }
    response = produce_raw(cluster, "orders", sent)
    assert [r.partition for r in response.partitions] == list(range(6))
    assert all(
        r.error == 0 and r.base_offset == 0 and r.last_offset == 4 for r in response.partitions
    )
    second = produce_raw(cluster, "orders", {4: sent[4]})
    assert second.partitions[0].base_offset == 5

    for p in range(6):
        (message,) = fetch_all(cluster, "orders", p)
        assert message.high_watermark == (10 if p == 4 else 5)
        stored = [bytes(b.raw()) for b in iter_batches(message.records)]
        # Only baseOffset and partitionLeaderEpoch change; the CRC-covered bytes do not.
        assert stored[0][8:12] == sent[p][8:12] and stored[0][16:] == sent[p][16:]
        assert DefaultRecordBatch(stored[0]).validate_crc()
        values = [r.value for r in iter_records(message.records)]
        assert values[:5] == [b"p%d-%d" % (p, i) for i in range(5)]


def test_a_request_spanning_nodes_with_one_corrupt_batch_writes_nothing(cluster):
    cluster.admin.create_topic("t", 3)
    good = make_batch([b"ok"])
    bad = bytearray(make_batch([b"corrupt me"]))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="t-2"):
        produce_raw(cluster, "t", {0: good, 1: good, 2: bytes(bad)})
    assert log_end_offsets(cluster, "t", 3) == [0, 0, 0]
    with pytest.raises(CorruptRecordError):
        produce_raw(cluster, "t", {2: bytes(bad)})  # single node: the node refuses
    assert log_end_offsets(cluster, "t", 3) == [0, 0, 0]
    with pytest.raises(CorruptRecordError):
        produce_raw(cluster, "t", {0: good[:-3]})  # torn batch
    assert log_end_offsets(cluster, "t", 3) == [0, 0, 0]


def test_bad_requests_get_clear_statuses_and_change_nothing(cluster):
    cluster.admin.create_topic("t", 2, configs={"max.message.bytes": "2000"})
    good = make_batch([b"x"])
    cases = [
        (UnknownTopicOrPartitionError, grpc.StatusCode.NOT_FOUND, "nope", {0: good}, 1),
        (UnknownTopicOrPartitionError, grpc.StatusCode.NOT_FOUND, "t", {7: good}, 1),
        (InvalidRequiredAcksError, grpc.StatusCode.INVALID_ARGUMENT, "t", {0: good}, 2),
        (
            RecordTooLargeError,
            grpc.StatusCode.INVALID_ARGUMENT,
            "t",
            {0: make_batch([b"y" * 5000])},
            1,
        ),
        (InvalidRequestError, grpc.StatusCode.INVALID_ARGUMENT, "t", {}, 1),
    ]
    for error, code, topic, batches, acks in cases:
        request = common_pb2.ProduceRequest(topic=topic, acks=acks)
        for p, records in batches.items():
            request.partitions.add(partition=p, records=records)
        with pytest.raises(grpc.RpcError) as info:
            cluster.stub.Produce(request, timeout=10)
        assert info.value.code() == code
        assert isinstance(error_from_rpc(info.value), error)
    assert log_end_offsets(cluster, "t", 2) == [0, 0]


def test_acks_all_on_a_lone_replica_is_acks_one(cluster):
    cluster.admin.create_topic("t", 1)
    response = produce_raw(cluster, "t", {0: make_batch([b"x"])}, acks=-1)
    assert (response.partitions[0].error, response.partitions[0].base_offset) == (0, 0)
    assert cluster.log("t", 0).high_watermark == 1


def test_oversize_request_is_refused_before_routing(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1, max_request_bytes=256 * 1024)
    try:
        cluster.admin.create_topic("t", 1)
        big = b"".join(make_batch([b"z" * 60_000]) for _ in range(6))
        with pytest.raises(RecordListTooLargeError):
            produce_raw(cluster, "t", {0: big})
        assert cluster.log("t", 0).log_end_offset == 0
    finally:
        cluster.close()


def test_acks_zero_answers_without_offsets_and_the_records_arrive(cluster):
    cluster.admin.create_topic("t", 1)
    response = produce_raw(cluster, "t", {0: make_batch([b"a", b"b"])}, acks=0)
    assert response.partitions[0].base_offset == -1
    assert wait_until(lambda: cluster.log("t", 0).log_end_offset == 2)


def test_stale_leader_epoch_gets_not_leader(cluster):
    cluster.admin.create_topic("t", 1)
    epoch = cluster.admin.describe_topic("t").partitions[0].leader_epoch
    produce_raw(cluster, "t", {0: make_batch([b"a"])}, epochs={0: epoch})
    with pytest.raises(NotLeaderError, match="refresh metadata"):
        produce_raw(cluster, "t", {0: make_batch([b"a"])}, epochs={0: epoch + 7})
    (message,) = list(
        cluster.client.fetch([FetchPosition("t", 0, 0, leader_epoch=epoch + 7)], max_wait_ms=0)
    )
    assert common_pb2.ErrorCode.Name(message.error) == "NOT_LEADER_OR_FOLLOWER"


def test_fetch_long_poll_is_woken_by_an_append(cluster):
    cluster.admin.create_topic("t", 1)
    request = common_pb2.FetchRequest(min_bytes=1, max_wait_ms=60_000, max_bytes=1 << 20)
    request.partitions.add(topic="t", partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    result = {}

    def fetch():
        # The call's deadline (20 s) is far below max_wait_ms (60 s): only a wake-up by the
        # append can answer in time.
        result["messages"] = list(cluster.stub.Fetch(request, timeout=20))

    thread = threading.Thread(target=fetch)
    thread.start()
    time.sleep(0.3)  # let the fetch reach its wait (it would also be correct if it had not)
    produce_raw(cluster, "t", {0: make_batch([b"wake up"])})
    thread.join(30)
    (message,) = result["messages"]
    assert [r.value for r in iter_records(message.records)] == [b"wake up"]


def test_fetch_waits_for_min_bytes_then_answers_with_what_it_has(cluster):
    cluster.admin.create_topic("t", 1)
    produce_raw(cluster, "t", {0: make_batch([b"small"])})
    messages = fetch_all(cluster, "t", 0, min_bytes=1 << 20, max_wait_ms=200)
    assert [r.value for m in messages for r in iter_records(m.records)] == [b"small"]


def test_fetch_streams_whole_batches_in_bounded_chunks_and_always_one_batch(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1)
    try:
        cluster.nodes[1].replicas.chunk_bytes = 64 * 1024
        cluster.admin.create_topic("t", 1)
        for i in range(20):
            produce_raw(cluster, "t", {0: make_batch([bytes([i]) * 16_000])})
        messages = fetch_all(cluster, "t", 0)
        assert len(messages) > 1
        assert all(len(m.records) <= 64 * 1024 for m in messages)
        for m in messages:  # each message holds whole batches
            assert sum(b.size_in_bytes for b in iter_batches(m.records)) == len(m.records)
        joined = b"".join(m.records for m in messages)
        log = cluster.log("t", 0)
        assert joined == log.read(0, 1 << 24)
        # max_bytes below one batch still returns that batch (progress is always possible).
        (first,) = fetch_all(cluster, "t", 0, max_bytes=100)
        assert len(list(iter_batches(first.records))) == 1
        # A fetch from the middle starts at the batch holding the offset.
        (middle,) = fetch_all(cluster, "t", 0, offset=7, max_bytes=10)
        assert next(iter_records(middle.records)).offset == 7
    finally:
        cluster.close()


def test_fetch_out_of_range_and_unknown_partition_are_per_partition_errors(cluster):
    cluster.admin.create_topic("t", 2)
    produce_raw(cluster, "t", {0: make_batch([b"a"]), 1: make_batch([b"b"])})
    positions = [
        FetchPosition("t", 0, 99),
        FetchPosition("t", 1, 0),
        FetchPosition("missing", 0, 0),
    ]
    messages = list(cluster.client.fetch(positions, max_wait_ms=0))
    by_tp = {(m.topic, m.partition): m for m in messages}
    assert common_pb2.ErrorCode.Name(by_tp[("t", 0)].error) == "OFFSET_OUT_OF_RANGE"
    assert by_tp[("t", 0)].high_watermark == 1
    assert [r.value for r in iter_records(by_tp[("t", 1)].records)] == [b"b"]
    assert common_pb2.ErrorCode.Name(by_tp[("missing", 0)].error) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_list_offsets_earliest_latest_and_by_timestamp(cluster):
    cluster.admin.create_topic("t", 1)
    base = time.time_ns() // 1_000_000 - 10_000
    for i in range(5):
        produce_raw(cluster, "t", {0: make_batch([b"%d" % i] * 3, timestamp_ms=base + i * 1000)})
    assert cluster.client.list_offsets("t", {0: EARLIEST})[0].offset == 0
    assert cluster.client.list_offsets("t", {0: LATEST})[0].offset == 15
    found = cluster.client.list_offsets("t", {0: base + 2500})[0]
    assert (found.offset, found.timestamp) == (9, base + 3000)
    assert cluster.client.list_offsets("t", {0: base + 99_999})[0].offset == -1
    newest = cluster.client.list_offsets("t", {0: MAX_TIMESTAMP})[0]
    assert (newest.offset, newest.timestamp) == (12, base + 4000)  # first of the newest batch
    cluster.log("t", 0).delete_records_before(6)
    assert cluster.client.list_offsets("t", {0: EARLIEST})[0].offset == 6
