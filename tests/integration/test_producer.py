"""The producer against a real in-process cluster: partitioning, batching triggers, memory
limits, retries across a node restart, delivery timeouts."""

import threading
import time

import pytest
from kafka.partitioner.default import DefaultPartitioner

from seglog.client.buffer_pool import BufferExhaustedError
from seglog.client.consumer import Consumer
from seglog.client.futures import BatchMetadata, ProducerClosedError, RecordMetadata
from seglog.client.partitioner import partition_for_key
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    RecordTooLargeError,
    RequestTimedOutError,
    SeglogError,
)
from seglog.records import RecordBatchBuilder
from tests.cluster import LocalCluster


def read_all(address, topic, partitions, expected):
    """Every record of the topic, by partition, reading until `expected` arrived."""
    consumer = Consumer(address, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    out = {p: [] for p in range(partitions)}
    got = 0
    deadline = time.monotonic() + 30
    while got < expected and time.monotonic() < deadline:
        for record in consumer.poll_records(timeout_ms=500):
            out[record.partition].append(record)
            got += 1
    consumer.close()
    return out


def test_keyed_records_land_where_kafkas_partitioner_puts_them(cluster):
    cluster.admin.create_topic("keyed", 7)
    keys = [f"customer-{i}".encode() for i in range(200)]
    with Producer(cluster.address, linger_ms=0) as producer:
        futures = [producer.send("keyed", b"v-" + key, key=key) for key in keys]
        metadata = [f.get(timeout=10) for f in futures]

    class SevenPartitions:  # the cluster view kafka-python's partitioner asks about
        def topics(self):
            return {"keyed"}

        def partitions_for_topic(self, topic):
            return set(range(7))

        available_partitions_for_topic = partitions_for_topic

    kafka_partitioner = DefaultPartitioner()
    for key, md in zip(keys, metadata, strict=True):
        expected = kafka_partitioner.partition("keyed", key, key, None, None, SevenPartitions())
        assert md.partition == expected
    stored = read_all(cluster.address, "keyed", 7, len(keys))
    for md, key in zip(metadata, keys, strict=True):
        record = next(r for r in stored[md.partition] if r.offset == md.offset)
        assert record.key == key and record.value == b"v-" + key


def test_unkeyed_records_stick_to_a_partition_until_its_batch_closes(cluster):
    cluster.admin.create_topic("sticky", 4)
    value = b"s" * 100
    builder = RecordBatchBuilder(max_bytes=1024)
    per_batch = 0
    while builder.append(None, value, 0):
        per_batch += 1
    with Producer(cluster.address, batch_size=1024, linger_ms=60_000) as producer:
        futures = [producer.send("sticky", value) for _ in range(per_batch * 5)]
        producer.flush(timeout=10)
        partitions = [f.get(timeout=10).partition for f in futures]
    runs = []
    for p in partitions:
        if runs and runs[-1][0] == p:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    assert len(runs) == 5
    assert all(count == per_batch for _, count in runs)
    assert all(a[0] != b[0] for a, b in zip(runs, runs[1:], strict=False))


def test_an_unkeyed_record_after_its_batch_was_sent_opens_a_batch_elsewhere(cluster):
    cluster.admin.create_topic("resticky", 3)
    with Producer(cluster.address, linger_ms=5) as producer:
        first = producer.send("resticky", b"one").get(timeout=10)  # lingered, sent, answered
        second = producer.send("resticky", b"two").get(timeout=10)
        third = producer.send("resticky", b"three", headers=[("h", b"x")]).get(timeout=10)
    # KIP-480: the sticky partition moves on when its batch is sent, never back at once.
    assert first.partition != second.partition != third.partition
    stored = read_all(cluster.address, "resticky", 3, 3)
    assert sorted((p, r.offset, r.value) for p, rs in stored.items() for r in rs) == sorted(
        [
            (first.partition, first.offset, b"one"),
            (second.partition, second.offset, b"two"),
            (third.partition, third.offset, b"three"),
        ]
    )


def test_unkeyed_records_in_one_batch_keep_their_headers_timestamps_and_callbacks(cluster):
    cluster.admin.create_topic("unkeyed", 2)
    seen = []
    with Producer(cluster.address, linger_ms=60_000) as producer:
        futures = [
            producer.send("unkeyed", b"plain"),
            producer.send(
                "unkeyed",
                b"with headers",
                headers=[("h", b"1"), ("none", None)],
                callback=lambda md, exc: seen.append((md, exc)),
            ),
            producer.send("unkeyed", b"stamped", timestamp_ms=1_600_000_000_000),
        ]
        producer.flush(timeout=10)
        metadata = [f.get(timeout=0) for f in futures]
    assert len({md.partition for md in metadata}) == 1
    assert [md.offset for md in metadata] == [0, 1, 2]
    assert seen == [(metadata[1], None)]
    stored = read_all(cluster.address, "unkeyed", 2, 3)[metadata[0].partition]
    assert [(r.key, r.value, r.headers) for r in stored] == [
        (None, b"plain", ()),
        (None, b"with headers", (("h", b"1"), ("none", None))),
        (None, b"stamped", ()),
    ]
    assert stored[2].timestamp_ms == 1_600_000_000_000


def test_keyed_records_tombstones_and_bytearray_keys_share_their_partitions_batches(cluster):
    cluster.admin.create_topic("keyed-batches", 3)
    keys = [b"a", b"b", b"c", b"a", bytearray(b"b"), b"c"]
    values = [b"1", b"2", b"3", None, b"5", b"6"]
    with Producer(cluster.address, linger_ms=60_000) as producer:
        futures = [
            producer.send("keyed-batches", v, key=k) for k, v in zip(keys, values, strict=True)
        ]
        producer.flush(timeout=10)
        metadata = [f.get(timeout=0) for f in futures]
    for i, j in ((0, 3), (1, 4), (2, 5)):  # the same key: the same partition, in order
        assert (
            metadata[i].partition == metadata[j].partition == partition_for_key(bytes(keys[i]), 3)
        )
        assert metadata[j].offset > metadata[i].offset
    stored = read_all(cluster.address, "keyed-batches", 3, len(keys))
    got = {
        (md.partition, md.offset): (bytes(k), v)
        for md, k, v in zip(metadata, keys, values, strict=True)
    }
    assert {(p, r.offset): (r.key, r.value) for p, rs in stored.items() for r in rs} == got


def test_a_topic_recreated_with_fewer_partitions_is_followed(cluster):
    cluster.admin.create_topic("reborn", 3)
    settings = dict(linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=2000)
    with Producer(cluster.address, retry_backoff_ms=50, **settings) as producer:
        assert {producer.send("reborn", b"%d" % i).get(timeout=10).partition for i in range(3)}
        cluster.admin.delete_topic("reborn")
        cluster.admin.create_topic("reborn", 1)
        # Records sent to partitions that are gone fail, but the producer learns the new
        # count from those failures and its later records, keyed or not, land.
        deadline = time.monotonic() + 20
        while True:
            unkeyed = producer.send("reborn", b"after")
            keyed = producer.send("reborn", b"keyed", key=b"customer-7")
            try:
                landed = [unkeyed.get(timeout=10), keyed.get(timeout=10)]
                break
            except SeglogError:
                assert time.monotonic() < deadline
    assert [md.partition for md in landed] == [0, 0]


def test_send_after_close_is_refused_even_with_a_batch_open(cluster):
    cluster.admin.create_topic("closed", 1)
    producer = Producer(cluster.address, linger_ms=60_000)
    future = producer.send("closed", b"queued")
    producer.close(timeout=10)
    assert future.get(timeout=0).offset == 0  # close sent what was queued
    with pytest.raises(ProducerClosedError, match="send after close"):
        producer.send("closed", b"late")
    with pytest.raises(ProducerClosedError):
        producer.send("closed", b"late", key=b"k")


def test_explicit_partition_is_checked_and_used(cluster):
    cluster.admin.create_topic("explicit", 3)
    with Producer(cluster.address) as producer:
        with pytest.raises(
            InvalidPartitionsError, match=r"partition 3 is not in the range \[0..2\]"
        ):
            producer.send("explicit", b"x", partition=3)
        md = producer.send("explicit", b"x", partition=2).get(timeout=10)
        assert md.partition == 2 and md.offset == 0


def test_a_full_batch_goes_without_waiting_for_linger_and_an_open_one_waits(cluster):
    cluster.admin.create_topic("triggers", 1)
    value = b"t" * 200
    with Producer(cluster.address, batch_size=2048, linger_ms=60_000) as producer:
        futures = [producer.send("triggers", value) for _ in range(12)]  # ~9 fill a batch
        futures[0].get(timeout=10)  # the full batch was sent: no flush, linger far away
        assert not futures[-1].done()  # the open batch waits out its linger
        producer.flush(timeout=10)
        assert futures[-1].get(timeout=0).offset == 11


def test_linger_sends_a_lone_record_without_flush(cluster):
    cluster.admin.create_topic("linger", 1)
    with Producer(cluster.address, linger_ms=20) as producer:
        md = producer.send("linger", b"alone").get(timeout=10)
    assert md == RecordMetadata("linger", 0, 0, md.timestamp_ms)


def test_callbacks_timestamps_headers_and_send_many(cluster):
    cluster.admin.create_topic("bulk", 2)
    seen = []
    with Producer(cluster.address, compression_type="lz4") as producer:
        producer.send(
            "bulk",
            b"v",
            key=b"k",
            partition=0,
            timestamp_ms=1_700_000_000_000,
            headers=[("h", b"1")],
            callback=lambda md, exc: seen.append((md, exc)),
        )
        bulk = producer.send_many("bulk", [b"%d" % i for i in range(5000)], partition=1)
        runs = bulk.get(timeout=10)
    assert seen == [(RecordMetadata("bulk", 0, 0, 1_700_000_000_000), None)]
    assert all(isinstance(run, BatchMetadata) for run in runs)
    assert sum(run.record_count for run in runs) == 5000
    offsets = [
        o for run in runs for o in range(run.base_offset, run.base_offset + run.record_count)
    ]
    assert offsets == list(range(5000))
    stored = read_all(cluster.address, "bulk", 2, 5001)
    (record,) = stored[0]
    assert (record.key, record.value, record.timestamp_ms, record.headers) == (
        b"k",
        b"v",
        1_700_000_000_000,
        (("h", b"1"),),
    )
    assert [r.value for r in stored[1]] == [b"%d" % i for i in range(5000)]


def test_acks_zero_completes_without_offsets_and_the_records_land(cluster):
    cluster.admin.create_topic("fire", 1)
    with Producer(cluster.address, acks=0) as producer:
        futures = [producer.send("fire", b"%d" % i) for i in range(100)]
        producer.flush(timeout=10)
        assert {f.get(timeout=0).offset for f in futures} == {-1}
    stored = read_all(cluster.address, "fire", 1, 100)
    assert [r.value for r in stored[0]] == [b"%d" % i for i in range(100)]


def test_a_record_larger_than_max_request_size_is_refused(cluster):
    cluster.admin.create_topic("big", 1)
    with (
        Producer(cluster.address, max_request_size=1000) as producer,
        pytest.raises(RecordTooLargeError, match="larger than max_request_size"),
    ):
        producer.send("big", b"x" * 2000)


def test_full_buffer_memory_blocks_send_then_times_out(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1)
    try:
        cluster.admin.create_topic("stuck", 1)
        producer = Producer(
            cluster.address,
            buffer_memory=4 * 4096,
            batch_size=4096,
            max_block_ms=300,
            linger_ms=0,
            retry_backoff_ms=50,
        )
        producer.send("stuck", b"warm").get(timeout=10)  # metadata known
        cluster.stop_node(1)  # nothing completes now: batches are retried and keep memory
        held = [producer.send("stuck", b"x" * 4000) for _ in range(4)]
        started_ns = time.monotonic_ns()
        with pytest.raises(BufferExhaustedError, match="no producer memory .* after 300 ms"):
            producer.send("stuck", b"x" * 4000)
        assert time.monotonic_ns() - started_ns >= 300_000_000
        assert not any(f.done() for f in held)
        cluster.start_node(1)  # memory comes back as the held batches complete
        assert [f.get(timeout=20).offset for f in held] == [1, 2, 3, 4]
        producer.send("stuck", b"x" * 4000).get(timeout=10)
        producer.close()
    finally:
        cluster.close()


def test_retries_across_a_node_restart_keep_order_and_lose_nothing(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=2)
    try:
        cluster.admin.create_topic("ordered", 4)
        producer = Producer(
            cluster.address,
            linger_ms=2,
            batch_size=1024,
            retry_backoff_ms=50,
            request_timeout_ms=2000,
            max_in_flight_requests_per_connection=5,
        )
        futures = []
        stop = threading.Event()

        def produce():
            seq = 0
            while not stop.is_set() or seq < 4000:
                futures.append(producer.send("ordered", b"%08d" % seq, partition=seq % 4))
                seq += 1
                if seq % 200 == 0:
                    time.sleep(0.01)

        writer = threading.Thread(target=produce)
        writer.start()
        time.sleep(0.3)
        victim = cluster.leader_of("ordered", 0).config.node_id
        cluster.stop_node(victim)
        time.sleep(0.5)
        cluster.start_node(victim)
        stop.set()
        writer.join()
        producer.flush(timeout=60)
        metadata = [f.get(timeout=0) for f in futures]
        producer.close()
        stored = read_all(cluster.address, "ordered", 4, len(futures))
        for p in range(4):
            sequence = [int(r.value) for r in stored[p]]
            assert sequence == sorted(sequence), f"partition {p} out of order"
            assert sequence == [i for i in range(len(futures)) if i % 4 == p]
        for md in metadata:
            assert int(
                next(r for r in stored[md.partition] if r.offset == md.offset).value
            ) % 4 == (md.partition)
    finally:
        cluster.close()


def test_batches_past_delivery_timeout_fail_with_a_timeout(tmp_path, caplog):
    cluster = LocalCluster(tmp_path, nodes=1)
    try:
        cluster.admin.create_topic("late", 1)
        producer = Producer(
            cluster.address,
            linger_ms=0,
            request_timeout_ms=300,
            delivery_timeout_ms=800,
            retry_backoff_ms=50,
        )
        producer.send("late", b"warm").get(timeout=10)
        cluster.stop_node(1)
        future = producer.send("late", b"never")
        with pytest.raises(RequestTimedOutError, match="delivery_timeout_ms \\(800\\)"):
            future.get(timeout=20)
        # The failed batch had its sequence: the next batches take a new producer id, and
        # that is said and counted, never silent.
        assert producer.metrics()["producer-metrics"]["producer-id-resets"] == 1
        assert "producer id 0 (epoch 0) abandoned" in caplog.text
        producer.close(timeout=5)
    finally:
        cluster.close()


@pytest.mark.parametrize(
    "config, message",
    [
        ({"lingerms": 5}, "unknown ProducerConfig setting 'lingerms'; did you mean 'linger_ms'"),
        ({"acks": "2"}, "acks must be 0, 1, -1 or all"),
        ({"acks": 2}, "acks must be 0, 1, -1 or all"),
        ({"compression_type": "brotli"}, "compression_type must be one of"),
        ({"linger_ms": -1}, "linger_ms must be at least 0"),
        ({"batch_size": "big"}, "batch_size must be an integer"),
        (
            {"delivery_timeout_ms": 1000, "request_timeout_ms": 30_000},
            r"delivery_timeout_ms \(1000\) must be at least linger_ms \+ request_timeout_ms",
        ),
        ({"batch_size": 1 << 20, "buffer_memory": 1 << 16}, "batch_size .* cannot exceed"),
    ],
)
def test_bad_producer_configs_are_refused_before_connecting(config, message):
    with pytest.raises(InvalidConfigError, match=message):
        Producer("127.0.0.1:1", **config)


def test_dotted_kafka_names_are_accepted():
    producer = Producer("127.0.0.1:1", **{"linger.ms": 7, "compression.type": "zstd"})
    try:
        assert producer.config.linger_ms == 7 and producer.config.compression_type == "zstd"
    finally:
        producer.close(timeout=0)
