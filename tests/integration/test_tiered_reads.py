"""Reads below the local log start served from the object store (KIP-405's remote fetch), on a
real cluster beside a real S3 server (SeaweedFS): the leaders' copier copies a tiered topic's
rolled segments and local retention deletes them from the nodes, then seglog's consumer (gRPC
and bulk), kafka-python, librdkafka and Kafka's console consumer read every record from offset
0, read_committed readers skip aborted transactions, a topic made again reads only its own
objects; a new follower starts at its leader's local log start with the producer state and
leader epochs the copied files hold. (ListOffsets and a stalled store: test_tiered_offsets.py;
one segment's reader: test_remote_segment_reads.py.)

One store and one two-node cluster for the module; each test its own topic."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from devtools import apache_kafka
from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.errors import SeglogError
from seglog.storage.remote_metadata import RemoteLogMetadata
from seglog.storage.remote_store import RemoteStore
from seglog.v1 import common_pb2
from tests.batches import make_batch
from tests.rdkafka import rdkafka_consume
from tests.tiered_topics import (
    BASE_MS,
    BATCHES,
    RECORDS_PER_BATCH,
    TIMEOUT_S,
    expected,
    fetch_answer,
    produce,
    tiered_cluster,
    tiered_topic,
    value,
)
from tests.txn_batches import ABORT, transactional_batch, write_marker
from tests.waiting import wait_for

PREFIX = "tiered-reads"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, seaweedfs):
    c = tiered_cluster(tmp_path_factory.mktemp("tiered-reads"), seaweedfs, PREFIX)
    yield c
    c.close()


@pytest.fixture
def store(seaweedfs):
    return RemoteStore(seaweedfs.storage_config(PREFIX))


@pytest.mark.parametrize("transport", ["grpc", "bulk"])
def test_seglog_consumer_reads_from_offset_zero_across_remote_and_local(cluster, store, transport):
    topic = f"cold-{transport}"
    local_start = tiered_topic(cluster, store, topic)
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
        while len(got) < len(expected()) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
    finally:
        consumer.close()
    assert [r.offset for r in got] == list(range(len(expected())))
    assert [r.value for r in got] == expected()
    assert got[0].timestamp_ms == BASE_MS


def test_kafka_clients_read_from_offset_zero_across_remote_and_local(cluster, store):
    topic = "cold-kafka"
    tiered_topic(cluster, store, topic)
    total = len(expected())
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
    assert [m.value for m in got] == expected()

    messages = rdkafka_consume(
        cluster.kafka_address, topic, [0], total, config={"fetch.message.max.bytes": 3000}
    )
    assert [m.offset() for m in messages] == list(range(total))
    assert [m.value() for m in messages] == expected()
    # librdkafka's own reset to the earliest offset lands on the remote log start too.
    reset = rdkafka_consume(
        cluster.kafka_address,
        topic,
        [0],
        1,
        offset=confluent_kafka.OFFSET_BEGINNING,
    )
    assert reset[0].offset() == 0


def test_a_new_follower_starts_from_the_store_state_without_copying_remote_history(cluster, store):
    topic = "cold-follower"
    idempotent_batches = 100  # the first 400 records: an idempotent producer's, then tiered

    def write(cluster, topic):
        with Producer(cluster.address, enable_idempotence=True, linger_ms=0) as producer:
            for i in range(idempotent_batches):
                futures = [
                    # Now's time: a producer idle past 7 days by its batches' time expires.
                    producer.send(topic, value(i, j), partition=0)
                    for j in range(RECORDS_PER_BATCH)
                ]
                producer.flush(TIMEOUT_S)
                assert all(f.get(TIMEOUT_S).offset >= 0 for f in futures)
        produce(cluster, topic, range(idempotent_batches, BATCHES))

    local_start = tiered_topic(cluster, store, topic, replicas=1, write=write)
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


@pytest.mark.slow
def test_kafkas_console_consumer_and_get_offsets_read_a_tiered_topic_from_the_start(cluster, store):
    """Kafka's own tools (4.3's Java clients): kafka-console-consumer from the earliest
    offset reads every record, remote then local; kafka-get-offsets --time -4/-5 answers the
    local log start and the last tiered offset (ListOffsets v8/v9)."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    topic = "cold-java"
    local_start = tiered_topic(cluster, store, topic)

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
        str(len(expected())),
        "--timeout-ms",
        str(TIMEOUT_S * 1000),
    )
    assert out.splitlines() == [v.decode() for v in expected()]
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
    tiered_topic(cluster, store, topic)
    assert fetch_answer(cluster, topic, 0).records  # the node has read the first topic's
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


def _created(cluster, topic, write) -> bool:
    """The topic made again and tiered (False while the old one's deletion is under way)."""
    try:
        tiered_topic(cluster, RemoteStore(cluster.remote_storage), topic, write=write)
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
        values = [value(i, j) for j in range(RECORDS_PER_BATCH)]
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
