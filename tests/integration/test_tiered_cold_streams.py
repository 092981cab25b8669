"""A consumer streaming a tiered topic from the store (every reader thread busy with its reads
and the chunks fetched ahead of it) never starves reads of local data on the same node: a
real cluster beside a real S3 server (SeaweedFS), the cold stream measured to be running
while the hot fetches are timed."""

from __future__ import annotations

import threading
import time

import pytest

from seglog.client.fetched import next_offset_after
from seglog.client.gateway import FetchPosition, GatewayClient
from seglog.storage.remote_metadata import RemoteLogMetadata
from seglog.storage.remote_store import RemoteStore
from tests.batches import make_batch
from tests.tiered_topics import TIMEOUT_S, tiered_cluster
from tests.waiting import wait_for

PREFIX = "tiered-cold-streams"
RECORDS_PER_BATCH = 64
BATCHES = 192  # of 64 KiB: 12 MiB over 1 MiB segments
FETCH_BYTES = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, seaweedfs):
    c = tiered_cluster(tmp_path_factory.mktemp("tiered-cold-streams"), seaweedfs, PREFIX)
    yield c
    c.close()


def _cold_topic(cluster, seaweedfs, topic: str) -> int:
    """BATCHES batches of 64 KiB, every rolled segment copied and deleted locally; the local
    log start."""
    cluster.admin.create_topic(
        topic,
        1,
        1,
        configs={
            "remote.storage.enable": "true",
            "local.retention.bytes": "1",
            "retention.ms": "-1",
            "segment.bytes": str(1024 * 1024),
            "file.delete.delay.ms": "0",
        },
    )
    for i in range(BATCHES):
        batch = make_batch([b"%06d-%03d" % (i, j) + b"c" * 1000 for j in range(RECORDS_PER_BATCH)])
        assert cluster.client.produce(topic, {0: batch})[0].error == 0
    leader = cluster.leader_of(topic, 0)
    log = leader.logs.get_log(topic, 0)
    topic_id = leader.logs.topic_id(topic, 0)
    metadata = RemoteLogMetadata(RemoteStore(seaweedfs.storage_config(PREFIX)), cache_ms=0)
    wait_for(
        lambda: (
            log.log_start_offset == log.segments[-1].base_offset > 0
            and metadata.remote_end_offset(topic_id, 0) == log.log_start_offset - 1
        ),
        TIMEOUT_S,
        "rolled segments copied and deleted locally",
        interval_s=0.2,
    )
    return log.log_start_offset


def test_a_cold_stream_filling_the_reader_pool_leaves_hot_reads_alone(cluster, seaweedfs):
    cold = "cold-stream"
    local_start = _cold_topic(cluster, seaweedfs, cold)
    leader = cluster.leader_of(cold, 0)
    cluster.admin.create_topic("hot-stream", 2, 1)
    hot_partition = next(p for p in (0, 1) if cluster.leader_of("hot-stream", p) is leader)
    values = [b"hot-%d" % i + b"h" * 200 for i in range(100)]
    assert cluster.client.produce("hot-stream", {hot_partition: make_batch(values)})[0].error == 0

    def hot_fetch() -> float:
        position = FetchPosition("hot-stream", hot_partition, 0, 64 * 1024)
        started = time.monotonic()
        answers = list(cluster.client.fetch([position], max_wait_ms=0))
        assert answers[0].records and answers[0].error == 0
        return time.monotonic() - started

    hot_before = max(hot_fetch() for _ in range(5))
    stop = threading.Event()
    cold_bytes = [0, 0]
    failures: list[BaseException] = []

    def stream(reader: int) -> None:
        """From offset 0 to the local start in 8 MiB fetches, again and again."""
        try:
            with GatewayClient(cluster.address) as client:
                while not stop.is_set():
                    offset = 0
                    while offset < local_start and not stop.is_set():
                        position = FetchPosition(cold, 0, offset, FETCH_BYTES)
                        for answer in client.fetch(
                            [position], max_wait_ms=0, max_bytes=FETCH_BYTES
                        ):
                            assert answer.error == 0, answer.error
                            if answer.records:
                                cold_bytes[reader] += len(answer.records)
                                offset = next_offset_after(answer.records, offset)
        except BaseException as exc:  # reported by the test below
            failures.append(exc)

    readers = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(2)]
    for reader in readers:
        reader.start()
    try:
        wait_for(lambda: sum(cold_bytes) >= 8 * 1024 * 1024, TIMEOUT_S, "the cold stream runs")
        remote = leader.replicas.remote
        busy = []
        cold_at = sum(cold_bytes)
        hot = []
        for _ in range(20):
            busy.append(remote._in_flight)
            hot.append(hot_fetch())
        cold_during = sum(cold_bytes) - cold_at
    finally:
        stop.set()
        for reader in readers:
            reader.join(TIMEOUT_S)
    assert not failures, failures
    # The cold stream ran all along, its reads and chunks fetched ahead on the reader threads.
    assert cold_during > 0 and max(busy) >= 1
    assert leader.replicas.remote.reader.chunks.hits > 0
    # Hot reads of the same node never waited behind it.
    assert max(hot) < max(0.5, 10 * hot_before), (hot, hot_before)
