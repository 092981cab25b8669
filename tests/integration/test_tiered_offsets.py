"""ListOffsets on a tiered topic (KIP-405, KIP-1005) answered as Kafka's, on a real cluster
beside a real S3 server (SeaweedFS): -2 the remote log start, -4 the local one, -5 the last
tiered offset, by time over remote and local segments; and a store that stops answering makes
cold reads end in bounded time (no records, or a retriable error) while the same node's hot
reads and ListOffsets keep theirs.

One store and one two-node cluster for the module; each test its own topic."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from seglog.client.gateway import FetchPosition
from seglog.storage.remote_store import RemoteStore
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
