"""Reads below the local log start served from the object store (KIP-405's remote fetch), on a
real cluster beside a real S3 server (SeaweedFS): the leaders' copier copies a tiered topic's
rolled segments and local retention deletes them from the nodes, then seglog's consumer (gRPC
and bulk), kafka-python, librdkafka and Kafka's console consumer read every record from offset
0; ListOffsets -2/-4/-5
and by time answer as Kafka's; a store that stops answering makes cold reads end in bounded
time while the same node's hot reads keep theirs; a new follower starts at its leader's local
log start with the producer state and leader epochs the copied files hold.

One store and one two-node cluster for the module; each test its own topic."""

from __future__ import annotations

import os
import signal
import threading
import time

import confluent_kafka
import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from devtools import apache_kafka
from seglog.client.consumer import Consumer
from seglog.client.gateway import FetchPosition
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.errors import SeglogError
from seglog.storage import Log
from seglog.storage.config import LogConfig
from seglog.storage.remote_indexes import RemoteIndexCache
from seglog.storage.remote_layout import (
    OFFSET_INDEX,
    SEGMENT_LOG,
    TIME_INDEX,
    SegmentKey,
    segment_object,
)
from seglog.storage.remote_metadata import COPY_SEGMENT_FINISHED, RemoteLogMetadata, RemoteSegment
from seglog.storage.remote_reads import RemoteLogReader
from seglog.storage.remote_store import RemoteStore
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.rdkafka import rdkafka_consume
from tests.txn_batches import ABORT, transactional_batch, write_marker
from tests.waiting import wait_for

BASE_MS = 1_700_000_000_000
RECORDS_PER_BATCH = 4
BATCHES = 150  # 600 records over ~12 segments of 4 KiB
REMOTE_WAIT_MS = 400  # remote.fetch.max.wait.ms on these nodes
TIMEOUT_S = 20


PREFIX = "tiered-reads"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, seaweedfs):
    c = LocalCluster(
        tmp_path_factory.mktemp("tiered-reads"),
        nodes=2,
        node_configs={"retention.check.interval.ms": "100"},
        remote_storage=seaweedfs.storage_config(PREFIX),
        node_settings={
            "remote_log_manager_task_interval_ms": 100,
            "remote_log_manager_task_retry_backoff_ms": 100,
            "remote_log_manager_task_retry_backoff_max_ms": 400,
            "remote_fetch_max_wait_ms": REMOTE_WAIT_MS,
            "remote_log_reader_threads": 2,
            "remote_log_reader_max_pending_tasks": 2,
        },
    )
    yield c
    c.close()


@pytest.fixture
def store(seaweedfs):
    return RemoteStore(seaweedfs.storage_config(PREFIX))


def _value(batch: int, record: int) -> bytes:
    return b"batch-%04d-record-%d-" % (batch, record) + b"x" * 80


def _tiered_topic(cluster, store, topic: str, replicas: int = 2, produce=None) -> int:
    """A topic of BATCHES batches (batch i at BASE_MS + i; `produce(cluster, topic)` writes
    them when given), its rolled segments copied by the leader and deleted from its disk
    (local.retention.bytes=1: only the active segment stays); the local log start now."""
    cluster.admin.create_topic(
        topic,
        1,
        replicas,
        configs={
            "remote.storage.enable": "true",
            "local.retention.bytes": "1",
            "retention.ms": "-1",  # the records are from 2023: kept whatever their age
            "segment.bytes": "4096",
            "index.interval.bytes": "512",
            "file.delete.delay.ms": "0",
        },
    )
    (produce or _produce)(cluster, topic)
    total = BATCHES * RECORDS_PER_BATCH
    leader = cluster.leader_of(topic, 0)
    log = leader.logs.get_log(topic, 0)
    topic_id = leader.logs.topic_id(topic, 0)
    metadata = RemoteLogMetadata(store, cache_ms=0)

    def tiered() -> bool:
        start = log.log_start_offset
        return (
            log.high_watermark == total
            and start == log.segments[-1].base_offset
            and metadata.log_start_offset(topic_id, 0) == 0
            and metadata.remote_end_offset(topic_id, 0) == start - 1
        )

    wait_for(
        tiered,
        TIMEOUT_S,
        "rolled segments copied and deleted locally",
        lambda: f"local start {log.log_start_offset}, segments {len(log.segments)}",
        interval_s=0.2,  # each poll LISTs the store: the nodes in this process share the GIL
    )
    return log.log_start_offset


def _produce(cluster, topic: str, batches: range = range(BATCHES)) -> None:
    for i in batches:
        values = [_value(i, j) for j in range(RECORDS_PER_BATCH)]
        answer = cluster.client.produce(topic, {0: make_batch(values, timestamp_ms=BASE_MS + i)})
        assert answer[0].error == 0


def _expected() -> list[bytes]:
    return [_value(i, j) for i in range(BATCHES) for j in range(RECORDS_PER_BATCH)]


@pytest.mark.parametrize("transport", ["grpc", "bulk"])
def test_seglog_consumer_reads_from_offset_zero_across_remote_and_local(cluster, store, transport):
    topic = f"cold-{transport}"
    local_start = _tiered_topic(cluster, store, topic)
    assert local_start > 100
    consumer = Consumer(
        cluster.address,
        fetch_transport=transport,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=3000,  # many fetches, each ending inside a remote segment
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        got: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(_expected()) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
    finally:
        consumer.close()
    assert [r.offset for r in got] == list(range(len(_expected())))
    assert [r.value for r in got] == _expected()
    assert got[0].timestamp_ms == BASE_MS


def test_kafka_clients_read_from_offset_zero_across_remote_and_local(cluster, store):
    topic = "cold-kafka"
    _tiered_topic(cluster, store, topic)
    total = len(_expected())
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.kafka_address,
        enable_auto_commit=False,
        max_partition_fetch_bytes=3000,
        consumer_timeout_ms=TIMEOUT_S * 1000,
    )
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp])[tp] == 0  # EARLIEST: the remote log start
        consumer.seek(tp, 0)
        got = []
        for message in consumer:
            got.append(message)
            if len(got) == total:
                break
    finally:
        consumer.close()
    assert [m.offset for m in got] == list(range(total))
    assert [m.value for m in got] == _expected()

    messages = rdkafka_consume(
        cluster.kafka_address, topic, [0], total, config={"fetch.message.max.bytes": 3000}
    )
    assert [m.offset() for m in messages] == list(range(total))
    assert [m.value() for m in messages] == _expected()
    # librdkafka's own reset to the earliest offset lands on the remote log start too.
    reset = rdkafka_consume(
        cluster.kafka_address,
        topic,
        [0],
        1,
        offset=confluent_kafka.OFFSET_BEGINNING,
    )
    assert reset[0].offset() == 0


def _fetch_answer(cluster, topic: str, offset: int):
    return next(iter(cluster.client.fetch([FetchPosition(topic, 0, offset, 4096)], max_wait_ms=0)))


def _list_offset(cluster, topic: str, timestamp: int, version: int = 9):
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=timestamp
    )
    request = ListOffsetsRequest[version](
        replica_id=-1,
        isolation_level=0,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[partition])],
    )
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, version, ListOffsetsResponse).topics[0].partitions[0]
    return answer.error_code, answer.offset, answer.timestamp


def test_list_offsets_earliest_earliest_local_and_latest_tiered_answer_as_kafka(cluster, store):
    topic = "cold-offsets"
    local_start = _tiered_topic(cluster, store, topic)
    total = len(_expected())
    assert _list_offset(cluster, topic, -2)[:2] == (0, 0)  # EARLIEST: the remote log start
    assert _list_offset(cluster, topic, -4)[:2] == (0, local_start)  # EARLIEST_LOCAL
    assert _list_offset(cluster, topic, -5)[:2] == (0, local_start - 1)  # LATEST_TIERED
    assert _list_offset(cluster, topic, -1)[:2] == (0, total)
    # A fetch of local data names the remote log start as the partition's (Kafka's
    # logStartOffset), learnt off the fetch path: the earliest offset a consumer may ask for.
    wait_for(
        lambda: _fetch_answer(cluster, topic, total - 1).log_start_offset == 0,
        TIMEOUT_S,
        "fetch answers naming the remote log start",
    )
    # By time: batch i holds offsets 4i..4i+3 at BASE_MS + i; remote and local both.
    assert _list_offset(cluster, topic, BASE_MS + 7) == (0, 28, BASE_MS + 7)
    last_local = BATCHES - 1
    assert _list_offset(cluster, topic, BASE_MS + last_local) == (
        0,
        4 * last_local,
        BASE_MS + last_local,
    )
    assert _list_offset(cluster, topic, BASE_MS + 10 * BATCHES)[:2] == (0, -1)
    # A topic without remote storage answers -5 with -1 and -4 as -2, as Kafka's.
    cluster.admin.create_topic("hot-offsets", 1, 1)
    assert _list_offset(cluster, "hot-offsets", -5)[:2] == (0, -1)
    assert _list_offset(cluster, "hot-offsets", -4)[:2] == (0, 0)


def test_a_stalled_store_ends_cold_reads_in_bounded_time_and_leaves_hot_reads_alone(
    cluster, store, seaweedfs
):
    topic = "cold-stalled"
    local_start = _tiered_topic(cluster, store, topic)
    total = len(_expected())

    def fetch(offset: int):
        started = time.monotonic()
        answers = list(cluster.client.fetch([FetchPosition(topic, 0, offset, 4096)], max_wait_ms=0))
        return answers[0], time.monotonic() - started

    hot_before = max(fetch(total - 10)[1] for _ in range(5))
    wait_for(  # the node has learnt the remote log start (off the fetch path)
        lambda: _fetch_answer(cluster, topic, total - 1).log_start_offset == 0,
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
        assert _list_offset(cluster, topic, -2)[:2] == (0, 0)
        assert _list_offset(cluster, topic, -5)[:2] == (0, local_start - 1)
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


def test_a_new_follower_starts_from_the_store_state_without_copying_remote_history(cluster, store):
    topic = "cold-follower"
    idempotent_batches = 100  # the first 400 records: an idempotent producer's, then tiered

    def produce(cluster, topic):
        with Producer(cluster.address, enable_idempotence=True, linger_ms=0) as producer:
            for i in range(idempotent_batches):
                futures = [
                    # Now's time: a producer idle past 7 days by its batches' time expires.
                    producer.send(topic, _value(i, j), partition=0)
                    for j in range(RECORDS_PER_BATCH)
                ]
                producer.flush(TIMEOUT_S)
                assert all(f.get(TIMEOUT_S).offset >= 0 for f in futures)
        _produce(cluster, topic, range(idempotent_batches, BATCHES))

    local_start = _tiered_topic(cluster, store, topic, replicas=1, produce=produce)
    assert local_start > idempotent_batches * RECORDS_PER_BATCH  # its writes are all remote
    leader = cluster.leader_of(topic, 0)
    leader_log = leader.logs.get_log(topic, 0)
    [written] = leader_log.active_producers()
    [other] = [n for n in cluster.nodes.values() if n is not leader]

    cluster.admin.alter_partition_reassignments(
        {TopicPartition(topic, 0): [leader.config.node_id, other.config.node_id]}
    )
    wait_for(
        lambda: not cluster.admin.list_partition_reassignments([TopicPartition(topic, 0)]),
        TIMEOUT_S,
        "the new replica in sync",
    )
    follower_log = other.logs.get_log(topic, 0)
    wait_for(
        lambda: follower_log.log_end_offset == leader_log.log_end_offset,
        TIMEOUT_S,
        "the follower caught up",
    )
    # Nothing below the local start was copied from the leader...
    assert follower_log.log_start_offset == local_start
    assert follower_log.segments[0].base_offset == local_start
    # ...and the producer whose writes are all tiered is known to it, as to the leader, from
    # the copied producer snapshot; its leader epochs are the leader's.
    assert follower_log.active_producers() == [written]
    assert follower_log.leader_epochs.entries == leader_log.leader_epochs.entries


def test_remote_segment_reads_answer_the_local_reads_bytes(tmp_path, seaweedfs):
    """RemoteLogReader over one segment uploaded as the copier lays it out: from every batch
    start and from inside batches, the bytes the local read answers (cut to max_bytes at
    whole batches); a batch larger than the first GET's window whole; bounded by max_offset;
    none when min_one_message is off and the first batch is too large."""
    store = RemoteStore(seaweedfs.storage_config(f"{PREFIX}-reader"))
    log = Log.open(tmp_path / "reader-0", LogConfig(index_interval_bytes=300))
    sizes = [1, 3, 40, 2, 900, 5, 1, 7]  # records per batch; the 900's batch is ~100 KiB
    for i, count in enumerate(sizes * 3):
        log.append(make_batch([b"%d-%d-" % (i, j) + b"y" * 100 for j in range(count)]))
    segment = log.segments[0]
    log.roll()  # trims the indexes to their entries, as a copied segment's are
    key = SegmentKey("reader", "id-reader", 0, 0, "segment-one")
    store.put_file(segment_object(key, SEGMENT_LOG), segment.log.path)
    store.put_bytes(segment_object(key, OFFSET_INDEX), segment.offset_index.path.read_bytes())
    store.put_bytes(segment_object(key, TIME_INDEX), segment.time_index.path.read_bytes())
    remote = RemoteSegment(
        topic_id="id-reader",
        partition=0,
        segment_id="segment-one",
        base_offset=0,
        end_offset=log.log_end_offset - 1,
        max_timestamp_ms=segment.max_timestamp_so_far,
        size_bytes=segment.size,
        leader_epochs=(),
        state=COPY_SEGMENT_FINISHED,
        topic="reader",
    )
    reader = RemoteLogReader(store, RemoteIndexCache())
    end = log.log_end_offset
    for offset in range(0, end, 41):  # batch starts and insides, each size of batch
        for max_bytes in (1, 3000, 200_000):
            local = bytes(log.read(offset, max_bytes))
            got = reader.read("reader", remote, offset, max_bytes)
            assert got.data == local, (offset, max_bytes)
    big = sum(sizes[:4])  # the first ~100 KiB batch: wider than one GET's window
    whole = reader.read("reader", remote, big + 10, 10)
    assert whole.data == bytes(log.read(big + 10, 10)) and len(whole.data) > 90_000
    assert whole.next_offset == big + 900
    assert reader.read("reader", remote, big, 10, min_one_message=False).data == b""
    # Read-ahead: the next read of a consumer going forward starts from bytes fetched ahead.
    first = reader.read("reader", remote, 0, 2000)
    reader.read_ahead("reader", remote, first.next_offset, first.next_position, 2000)
    following = reader.read("reader", remote, first.next_offset, 3000)
    assert reader.ahead.hits == 1
    assert following.data == bytes(log.read(first.next_offset, 3000))
    bounded = reader.read("reader", remote, 0, 1 << 20, max_offset=big)
    assert bounded.next_offset == big and bounded.data == bytes(log.read(0, len(bounded.data)))
    log.close()


@pytest.mark.slow
def test_kafkas_console_consumer_and_get_offsets_read_a_tiered_topic_from_the_start(cluster, store):
    """Kafka's own tools (4.3's Java clients): kafka-console-consumer from the earliest
    offset reads every record, remote then local; kafka-get-offsets --time -4/-5 answers the
    local log start and the last tiered offset (ListOffsets v8/v9)."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    topic = "cold-java"
    local_start = _tiered_topic(cluster, store, topic)

    def tool(main_class: str, *args: str) -> str:
        done = apache_kafka.run_tool(main_class, "--bootstrap-server", cluster.kafka_address, *args)
        assert done.returncode == 0, done.stderr.decode()[-4000:]
        return done.stdout.decode()

    out = tool(
        apache_kafka.CONSOLE_CONSUMER,
        "--topic",
        topic,
        "--partition",
        "0",
        "--offset",
        "earliest",
        "--max-messages",
        str(len(_expected())),
        "--timeout-ms",
        str(TIMEOUT_S * 1000),
    )
    assert out.splitlines() == [v.decode() for v in _expected()]
    assert tool(apache_kafka.GET_OFFSETS_TOOL, "--topic", topic, "--time", "-4").split() == [
        f"{topic}:0:{local_start}"
    ]
    assert tool(apache_kafka.GET_OFFSETS_TOOL, "--topic", topic, "--time", "-5").split() == [
        f"{topic}:0:{local_start - 1}"
    ]


def test_a_topic_made_again_under_its_name_never_reads_its_predecessors_objects(cluster, store):
    """The remote data a node learnt of belongs to a topic id: a tiered topic deleted and
    made again under the same name reads its own copied segments from offset 0, not the
    old topic's (whatever the store still holds of them)."""
    topic = "cold-again"
    _tiered_topic(cluster, store, topic)
    assert _fetch_answer(cluster, topic, 0).records  # the node has read the first topic's
    cluster.admin.delete_topic(topic)
    wait_for(
        lambda: topic not in cluster.admin.list_topics(),
        TIMEOUT_S,
        "the topic deleted",
    )

    def produce_new(cluster, topic):
        for i in range(BATCHES):
            values = [b"again-%04d-%d-" % (i, j) + b"z" * 80 for j in range(RECORDS_PER_BATCH)]
            answer = cluster.client.produce(topic, {0: make_batch(values)})
            assert answer[0].error == 0

    wait_for(
        lambda: _created(cluster, topic, produce_new),
        TIMEOUT_S,
        "the topic made again",
    )
    total = BATCHES * RECORDS_PER_BATCH
    consumer = Consumer(cluster.address, fetch_transport="grpc", max_partition_fetch_bytes=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        got: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < total and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
    finally:
        consumer.close()
    assert [r.offset for r in got] == list(range(total))
    assert all(r.value.startswith(b"again-") for r in got)


def _created(cluster, topic, produce) -> bool:
    """The topic made again and tiered (False while the old one's deletion is under way)."""
    try:
        _tiered_topic(cluster, RemoteStore(cluster.remote_storage), topic, produce=produce)
    except SeglogError as exc:
        if exc.reason != "TOPIC_ALREADY_EXISTS":
            raise
        return False
    return True


def test_read_committed_reads_of_copied_segments_skip_aborted_transactions(cluster, store):
    """Transactions aborted in segments since copied and deleted locally: a read_committed
    reader from offset 0 gets the aborted transactions from the copied `.txnindex` files and
    skips them (Kafka's RemoteLogManager collects them from remote segments too); a
    read_uncommitted reader gets every record."""
    topic, aborter = "cold-txn", 7001
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
    route = cluster.gateway.registry.route(topic, 0)
    stub = cluster.gateway.connections.get(route.leader, route.address).stub
    kept: list[bytes] = []

    def plain(i: int) -> None:
        values = [_value(i, j) for j in range(RECORDS_PER_BATCH)]
        kept.extend(values)
        assert cluster.client.produce(topic, {0: make_batch(values)})[0].error == 0

    for i in range(60):
        aborted = [b"aborted-%03d-" % i + b"y" * 80]
        request = common_pb2.ProduceRequest(topic=topic, acks=-1, timeout_ms=5000)
        request.partitions.add(
            partition=0, records=transactional_batch(aborter, aborted, sequence=i)
        )
        assert stub.Append(request, timeout=10).partitions[0].error == 0
        plain(i)
        if i % 10 == 9:
            write_marker(stub, topic, 0, aborter, ABORT)
    leader = cluster.leader_of(topic, 0)
    log = leader.logs.get_log(topic, 0)
    topic_id = leader.logs.topic_id(topic, 0)
    metadata = RemoteLogMetadata(store, cache_ms=0)
    last_marker = log.high_watermark - 1
    for i in range(60, 100):  # the last marker's segment rolls
        plain(i)
    # Every aborted transaction's marker is in a copied segment, deleted locally.
    wait_for(
        lambda: (
            log.log_start_offset > last_marker
            and (metadata.remote_end_offset(topic_id, 0) or -1) >= log.log_start_offset - 1
        ),
        TIMEOUT_S,
        "the aborted transactions' segments copied and deleted locally",
        interval_s=0.2,
    )
    everything = len(kept) + 60
    for level, expected_count in (("read_committed", len(kept)), ("read_uncommitted", everything)):
        consumer = Consumer(
            cluster.address,
            isolation_level=level,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=3000,
        )
        try:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek(TopicPartition(topic, 0), 0)
            got: list = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < expected_count and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    got.extend(records)
        finally:
            consumer.close()
        values = [r.value for r in got]
        if level == "read_committed":
            assert values == kept
        else:
            assert len(values) == expected_count
            assert sum(v.startswith(b"aborted-") for v in values) == 60
