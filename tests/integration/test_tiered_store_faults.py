"""The object store failing under a tiered cluster, as a network fault: the nodes reach a real
S3 store (SeaweedFS) through a proxy that answers 503 or answers late (tests/s3_fault_proxy.py).
Copies retry and local segments stay until their copy is confirmed; reads below the local log
start answer a retriable error (or, late, nothing) and read again once the store answers;
nothing is lost or duplicated, in the store or to a consumer; the store stopped for 30 s under
a producer's load loses no acknowledged record.

One store, one proxy and one two-node cluster for the module; each test its own topic."""

from __future__ import annotations

import threading
import time

import pytest

from seglog.client.consumer import Consumer
from seglog.client.gateway import FetchPosition
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.storage.remote_metadata import RemoteLogMetadata
from seglog.storage.remote_store import RemoteStorageConfig, RemoteStore
from seglog.v1 import common_pb2
from tests.cluster import LocalCluster
from tests.s3_fault_proxy import S3FaultProxy
from tests.tiered_topics import (
    TIMEOUT_S,
    expected,
    produce,
    tiered_topic,
)
from tests.waiting import wait_for

PREFIX = "tiered-faults"
# remote.fetch.max.wait.ms: longer than a read of a store answering 503 takes (botocore's
# two attempts, with backoff, on a loaded machine), so that such a read answers its error
# rather than time out.
REMOTE_WAIT_MS = 6000
# A stalled store's answer comes this long after the wait has ended the fetch.
STALL_S = 15.0


@pytest.fixture(scope="module")
def proxy(seaweedfs):
    p = S3FaultProxy(seaweedfs.endpoint_url)
    yield p
    p.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, seaweedfs, proxy):
    direct = seaweedfs.storage_config(PREFIX)
    through_proxy = RemoteStorageConfig(
        endpoint_url=proxy.endpoint_url,
        bucket=direct.bucket,
        access_key_id=direct.access_key_id,
        secret_access_key=direct.secret_access_key,
        prefix=PREFIX,
    )
    c = LocalCluster(
        tmp_path_factory.mktemp("tiered-faults"),
        nodes=2,
        node_configs={"retention.check.interval.ms": "100"},
        remote_storage=through_proxy,
        node_settings={
            "remote_log_manager_task_interval_ms": 100,
            "remote_log_manager_task_retry_backoff_ms": 100,
            "remote_log_manager_task_retry_backoff_max_ms": 400,
            "remote_fetch_max_wait_ms": REMOTE_WAIT_MS,
        },
    )
    yield c
    c.close()


@pytest.fixture
def store(seaweedfs):
    """The store itself, not through the proxy: what the test checks with."""
    return RemoteStore(seaweedfs.storage_config(PREFIX))


@pytest.fixture(autouse=True)
def healed(proxy):
    proxy.set("pass")
    yield
    proxy.set("pass")


def _consume_all(cluster, topic: str) -> list:
    consumer = Consumer(cluster.address, fetch_transport="grpc", max_partition_fetch_bytes=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        got: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(expected()) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
    finally:
        consumer.close()
    return got


def test_copies_retry_through_5xx_and_keep_local_segments_until_confirmed(cluster, store, proxy):
    topic = "faults-copy"
    proxy.set("fail", methods={"PUT", "POST"})  # every write to the store answers 503
    cluster.admin.create_topic(
        topic,
        1,
        2,
        configs={
            "remote.storage.enable": "true",
            "local.retention.bytes": "1",
            "retention.ms": "-1",
            "segment.bytes": "4096",
            "index.interval.bytes": "512",
            "file.delete.delay.ms": "0",
        },
    )
    produce(cluster, topic)
    leader = cluster.leader_of(topic, 0)
    log = leader.logs.get_log(topic, 0)
    manager = leader.remote_log_manager
    failures = manager.failures
    wait_for(lambda: manager.failures >= failures + 3, TIMEOUT_S, "copies retried")
    retention_passes = leader.logs.retention_passes
    wait_for(lambda: leader.logs.retention_passes >= retention_passes + 3, TIMEOUT_S, "retention")
    # Nothing was confirmed, so nothing went from the disk.
    assert log.log_start_offset == 0 and len(log.segments) > 10
    assert "503" in manager.last_error or "SlowDown" in manager.last_error, manager.last_error
    topic_id = leader.logs.topic_id(topic, 0)
    metadata = RemoteLogMetadata(store, cache_ms=0)
    assert metadata.segments(topic_id, 0) == []
    proxy.set("pass")
    wait_for(
        lambda: (
            log.log_start_offset == log.segments[-1].base_offset
            and metadata.remote_end_offset(topic_id, 0) == log.log_start_offset - 1
        ),
        TIMEOUT_S,
        "copies caught up and local retention after them",
        interval_s=0.2,
    )
    # Every offset once in the store: contiguous copies, no overlap, from 0.
    segments = metadata.segments(topic_id, 0)
    assert segments[0].base_offset == 0
    for before, after in zip(segments, segments[1:], strict=False):
        assert after.base_offset == before.end_offset + 1
    got = _consume_all(cluster, topic)
    assert [r.offset for r in got] == list(range(len(expected())))
    assert [r.value for r in got] == expected()


@pytest.mark.long  # copies through 5xx stay in make test
def test_reads_answer_retriable_errors_while_the_store_fails_and_read_again_after(
    cluster, store, proxy
):
    topic = "faults-read"
    tiered_topic(cluster, store, topic)

    def fetch(offset: int):
        started = time.monotonic()
        answers = list(cluster.client.fetch([FetchPosition(topic, 0, offset, 4096)], max_wait_ms=0))
        return answers[0], time.monotonic() - started

    proxy.set("fail", methods={"GET"})
    answer, took = fetch(0)
    assert answer.error == common_pb2.KAFKA_STORAGE_ERROR and not answer.records
    assert took < TIMEOUT_S
    proxy.set("slow", delay_s=STALL_S)
    answer, took = fetch(40)
    # Past remote.fetch.max.wait.ms: no records and no error (Kafka's DelayedRemoteFetch),
    # answered well before the store does.
    assert not answer.records and answer.error == 0
    assert REMOTE_WAIT_MS / 1000 <= took < STALL_S - 3
    proxy.set("pass")
    got = _consume_all(cluster, topic)
    assert [r.offset for r in got] == list(range(len(expected())))
    assert [r.value for r in got] == expected()


@pytest.mark.long  # 30 s of outage under load: a campaign of its own, in make test-long
def test_the_store_stopped_30s_under_load_loses_no_acknowledged_record(cluster, store, seaweedfs):
    """A producer writing all along (acks=all) while the store is down for 30 s: every
    acknowledged record is read back from offset 0 at its offset, and the copies catch up
    once the store is back (local retention then deletes what they cover)."""
    topic = "faults-outage"
    cluster.admin.create_topic(
        topic,
        1,
        2,
        configs={
            "remote.storage.enable": "true",
            "local.retention.bytes": "1",
            "retention.ms": "-1",
            "segment.bytes": "65536",
            "file.delete.delay.ms": "0",
        },
    )
    acknowledged: dict[int, bytes] = {}
    stop = threading.Event()

    def write() -> None:
        with Producer(cluster.address, acks=-1, linger_ms=5) as producer:
            i = 0
            while not stop.is_set():
                values = [b"outage-%06d-" % (i + j) + b"o" * 200 for j in range(50)]
                futures = [producer.send(topic, v, partition=0) for v in values]
                producer.flush(TIMEOUT_S)
                for value, future in zip(values, futures, strict=True):
                    acknowledged[future.get(TIMEOUT_S).offset] = value
                i += len(values)
                stop.wait(0.05)  # a steady load, not a flood: copies must catch up after

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    leader = cluster.leader_of(topic, 0)
    log = leader.logs.get_log(topic, 0)
    wait_for(lambda: len(acknowledged) > 500, TIMEOUT_S, "writes before the outage")
    seaweedfs.kill()
    try:
        down_until = time.monotonic() + 30
        wait_for(lambda: time.monotonic() > down_until, 40, "30 s of outage under load")
        assert leader.remote_log_manager.failures > 0
    finally:
        seaweedfs.start()
    stop.set()
    writer.join(TIMEOUT_S * 2)
    assert not writer.is_alive()
    topic_id = leader.logs.topic_id(topic, 0)
    metadata = RemoteLogMetadata(store, cache_ms=0)
    wait_for(
        lambda: (
            log.log_start_offset == log.segments[-1].base_offset
            and metadata.remote_end_offset(topic_id, 0) == log.log_start_offset - 1
        ),
        60,
        "copies caught up after the outage",
        interval_s=0.5,
    )
    end = max(acknowledged) + 1
    consumer = Consumer(cluster.address, fetch_transport="grpc")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.update((r.offset, r.value) for r in records)
    finally:
        consumer.close()
    lost = [o for o, v in acknowledged.items() if got.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:5]}"


def test_store_failures_are_seglog_errors_naming_what_failed(store, seaweedfs, tmp_path):
    from seglog.errors import SeglogError
    from seglog.storage.remote_store import (
        RemoteObjectNotFoundError,
        RemoteStorageConfig,
        RemoteStorageError,
    )

    with pytest.raises(RemoteObjectNotFoundError, match="no/such/key"):
        store.get("no/such/key")
    assert store.get_range("no-range", 0, 0) == b""
    with pytest.raises(SeglogError, match="reading"):  # the local file's fault, not the store's
        store.put_file("x", tmp_path / "missing")
    bad = RemoteStore(
        RemoteStorageConfig(
            endpoint_url="not a url", bucket="b", access_key_id="k", secret_access_key="s"
        )
    )
    with pytest.raises(RemoteStorageError, match="no S3 client"):
        bad.list("")
    gone = RemoteStore(
        RemoteStorageConfig(
            endpoint_url="http://127.0.0.1:9", bucket="b", access_key_id="k", secret_access_key="s"
        )
    )
    with pytest.raises(RemoteStorageError, match="list of 'p/'") as raised:
        gone.list("p/")
    assert raised.value.retriable
    wrong_key = RemoteStore(
        RemoteStorageConfig(
            endpoint_url=seaweedfs.endpoint_url,
            bucket="seglog",
            access_key_id="seglog",
            secret_access_key="not-the-secret",
        )
    )
    with pytest.raises(RemoteStorageError, match="SignatureDoesNotMatch|AccessDenied"):
        wrong_key.put_bytes("x", b"y")
