"""ListOffsets and DeleteRecords on a tiered topic (KIP-405, KIP-1005) answered as Kafka's, on
a real cluster beside a real S3 server (SeaweedFS): -2 the remote log start, -4 the local one,
-5 the last tiered offset, by time over remote and local segments; DeleteRecords inside the
copied segments moving the log start below the local one; and a store that stops answering makes
cold reads end in bounded time (no records, or a retriable error) while the same node's hot
reads and ListOffsets keep theirs.

One store and one two-node cluster for the module; each test its own topic."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from seglog.client.consumer import Consumer
from seglog.client.gateway import FetchPosition
from seglog.client.structs import TopicPartition
from seglog.storage.remote_metadata import RemoteLogMetadata
from seglog.storage.remote_store import RemoteStore
from seglog.v1 import common_pb2
from tests.tiered_topics import (
    BASE_MS,
    BATCHES,
    REMOTE_WAIT_MS,
    TIMEOUT_S,
    expected,
    fetch_answer,
    list_offset,
    tiered_cluster,
    tiered_topic,
)
from tests.waiting import wait_for

PREFIX = "tiered-offsets"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, seaweedfs):
    c = tiered_cluster(tmp_path_factory.mktemp("tiered-offsets"), seaweedfs, PREFIX)
    yield c
    c.close()


@pytest.fixture
def store(seaweedfs):
    return RemoteStore(seaweedfs.storage_config(PREFIX))


def test_list_offsets_earliest_earliest_local_and_latest_tiered_answer_as_kafka(cluster, store):
    topic = "cold-offsets"
    local_start = tiered_topic(cluster, store, topic)
    total = len(expected())
    assert list_offset(cluster, topic, -2)[:2] == (0, 0)  # EARLIEST: the remote log start
    assert list_offset(cluster, topic, -4)[:2] == (0, local_start)  # EARLIEST_LOCAL
    assert list_offset(cluster, topic, -5)[:2] == (0, local_start - 1)  # LATEST_TIERED
    assert list_offset(cluster, topic, -1)[:2] == (0, total)
    # A fetch of local data names the remote log start as the partition's (Kafka's
    # logStartOffset), learnt off the fetch path: the earliest offset a consumer may ask for.
    wait_for(
        lambda: fetch_answer(cluster, topic, total - 1).log_start_offset == 0,
        TIMEOUT_S,
        "fetch answers naming the remote log start",
    )
    # By time: batch i holds offsets 4i..4i+3 at BASE_MS + i; remote and local both.
    assert list_offset(cluster, topic, BASE_MS + 7) == (0, 28, BASE_MS + 7)
    last_local = BATCHES - 1
    assert list_offset(cluster, topic, BASE_MS + last_local) == (
        0,
        4 * last_local,
        BASE_MS + last_local,
    )
    assert list_offset(cluster, topic, BASE_MS + 10 * BATCHES)[:2] == (0, -1)
    # A topic without remote storage answers -5 with -1 and -4 as -2, as Kafka's.
    cluster.admin.create_topic("hot-offsets", 1, 1)
    assert list_offset(cluster, "hot-offsets", -5)[:2] == (0, -1)
    assert list_offset(cluster, "hot-offsets", -4)[:2] == (0, 0)


def test_a_stalled_store_ends_cold_reads_in_bounded_time_and_leaves_hot_reads_alone(
    cluster, store, seaweedfs
):
    topic = "cold-stalled"
    local_start = tiered_topic(cluster, store, topic)
    total = len(expected())

    def fetch(offset: int):
        started = time.monotonic()
        answers = list(cluster.client.fetch([FetchPosition(topic, 0, offset, 4096)], max_wait_ms=0))
        return answers[0], time.monotonic() - started

    hot_before = max(fetch(total - 10)[1] for _ in range(5))
    wait_for(  # the node has learnt the remote log start (off the fetch path)
        lambda: fetch_answer(cluster, topic, total - 1).log_start_offset == 0,
        TIMEOUT_S,
        "fetch answers naming the remote log start",
    )
    os.kill(seaweedfs.pid, signal.SIGSTOP)  # accepts connections, never answers: GETs hang
    try:
        cold: list = []

        def cold_reader(offset: int) -> None:
            cold.append(fetch(offset))

        readers = [
            threading.Thread(target=cold_reader, args=(i * 16,), daemon=True) for i in range(8)
        ]
        for reader in readers:
            reader.start()
        hot = [fetch(local_start + (i % 50))[1] for i in range(20)]
        # ListOffsets' earliest and latest tiered answer from what the node knows already.
        assert list_offset(cluster, topic, -2)[:2] == (0, 0)
        assert list_offset(cluster, topic, -5)[:2] == (0, local_start - 1)
        for reader in readers:
            reader.join(TIMEOUT_S)
        assert len(cold) == len(readers)
    finally:
        os.kill(seaweedfs.pid, signal.SIGCONT)
    for answer, took in cold:
        # Timed out (no records, no error, as Kafka's DelayedRemoteFetch) or refused as
        # retriable (KAFKA_STORAGE_ERROR: the readers and their queue are full), never hung.
        assert took < REMOTE_WAIT_MS / 1000 + 2.0
        assert not answer.records
        assert answer.error in (0, 21)  # NONE, KAFKA_STORAGE_ERROR
    assert any(answer.error == 21 for answer, _ in cold)  # 8 readers > 2 threads + 2 queued
    # Hot reads of the same node never waited for the store.
    assert max(hot) < max(0.5, 10 * hot_before)
    # With the store back, the cold reads answer again.
    wait_for(lambda: fetch(0)[0].records, TIMEOUT_S, "a cold read answered again")


def test_delete_records_below_the_local_start_moves_the_log_start_as_kafka(cluster, store):
    """DeleteRecords at an offset inside the copied segments: the log start moves there
    (ListOffsets -2, fetches below it OFFSET_OUT_OF_RANGE, a consumer from it reads on),
    the local start stays, and remote retention deletes the segments wholly below it."""
    topic = "cold-delete-records"
    local_start = tiered_topic(cluster, store, topic)
    total = len(expected())
    leader = cluster.leader_of(topic, 0)
    topic_id = leader.logs.topic_id(topic, 0)
    metadata = RemoteLogMetadata(store, cache_ms=0)
    first_segment_end = metadata.segments(topic_id, 0)[0].end_offset
    cut = first_segment_end + 5  # inside the second copied segment
    assert cut < local_start
    answer = cluster.admin.delete_records({TopicPartition(topic, 0): cut})
    assert answer[TopicPartition(topic, 0)] == cut
    assert list_offset(cluster, topic, -2)[:2] == (0, cut)
    assert list_offset(cluster, topic, -4)[:2] == (0, local_start)
    below = fetch_answer(cluster, topic, cut - 1)
    assert below.error == common_pb2.OFFSET_OUT_OF_RANGE and not below.records
    consumer = Consumer(cluster.address, fetch_transport="grpc", max_partition_fetch_bytes=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), cut)
        got: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < total - cut and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
    finally:
        consumer.close()
    assert [r.offset for r in got] == list(range(cut, total))
    assert [r.value for r in got] == expected()[cut:]
    # The first segment, wholly below the cut, is deleted from the store; the one the cut
    # falls in stays (its later records are readable).
    wait_for(
        lambda: metadata.copied_segments(topic_id, 0)[0].base_offset > first_segment_end,
        TIMEOUT_S,
        "the segment below the new log start deleted",
        interval_s=0.2,
    )
    assert not any(
        key.startswith(f"{topic}-{topic_id}/0/{0:020d}-") for key in store.list(f"{topic}-")
    )
    assert metadata.log_start_offset(topic_id, 0) == cut
    # Asking for an earlier offset does not move the start back.
    assert cluster.admin.delete_records({TopicPartition(topic, 0): 3}) == {
        TopicPartition(topic, 0): cut
    }
