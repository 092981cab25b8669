"""The consumer against a real in-process cluster: reading, seeking, resets, compression,
configs, corrupt batches and kafka-python's names. (Consumer groups and committed offsets:
test_consumer_groups.py.)"""

from __future__ import annotations

import time

import pytest

from seglog.client.consumer import Consumer, NoOffsetForPartitionError
from seglog.client.producer import Producer
from seglog.client.structs import OffsetAndTimestamp, TopicPartition
from seglog.errors import CorruptRecordError, InvalidConfigError
from seglog.records import CREATE_TIME
from tests.batches import make_batch
from tests.cluster import drain
from tests.producing import produce
from tests.waiting import wait_until


def test_assigned_partitions_are_read_in_order_with_every_field(cluster):
    cluster.admin.create_topic("events", 2)
    with Producer(cluster.address) as producer:
        for i in range(300):
            producer.send(
                "events",
                b"value-%d" % i,
                key=b"key-%d" % i,
                partition=i % 2,
                timestamp_ms=1_600_000_000_000 + i,
                headers=[("n", b"%d" % i)],
            )
    with Consumer(cluster.address, auto_offset_reset="earliest", max_poll_records=50) as consumer:
        consumer.assign([TopicPartition("events", 0), ("events", 1)])
        records = drain(consumer, 300)
        assert all(len(batch) <= 50 for batch in [records[i : i + 50] for i in range(0, 300, 50)])
    assert len(records) == 300
    for p in (0, 1):
        mine = [r for r in records if r.partition == p]
        assert [r.offset for r in mine] == list(range(150))
        for r in mine:
            i = int(r.value.split(b"-")[1])
            assert i % 2 == p and r.key == b"key-%d" % i
            assert r.timestamp_ms == 1_600_000_000_000 + i and r.timestamp_type == CREATE_TIME
            assert r.topic == "events" and r.headers == (("n", b"%d" % i),)


def test_poll_respects_max_records_and_position_follows(cluster):
    cluster.admin.create_topic("paged", 1)
    produce(cluster.address, "paged", [b"%d" % i for i in range(100)])
    tp = TopicPartition("paged", 0)
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        first = []
        while not first:
            first = consumer.poll_records(timeout_ms=500, max_records=7)
        assert [r.offset for r in first] == list(range(7))
        assert consumer.position(tp) == 7
        rest = drain(consumer, 93)
        assert [r.offset for r in rest] == list(range(7, 100))
        assert consumer.position(tp) == 100


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_decoded_by_the_consumer(cluster, codec):
    cluster.admin.create_topic("packed", 1)
    values = [b"compressible %d " % i * 10 for i in range(2000)]
    with Producer(cluster.address, compression_type=codec) as producer:
        producer.send_many("packed", values)
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([("packed", 0)])
        assert [r.value for r in drain(consumer, 2000)] == values


def test_seek_by_timestamp_to_beginning_and_to_end(cluster):
    cluster.admin.create_topic("timeline", 1)
    base = 1_650_000_000_000
    for i in range(10):
        produce(cluster.address, "timeline", [b"t%d" % i], timestamp_ms=base + i * 1000)
    tp = TopicPartition("timeline", 0)
    with Consumer(cluster.address, auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        found = consumer.offsets_for_times({tp: base + 4500})
        assert found == {tp: OffsetAndTimestamp(5, base + 5000)}
        assert consumer.offsets_for_times({tp: base + 60_000}) == {tp: None}
        consumer.seek(tp, found[tp].offset)
        assert [r.value for r in drain(consumer, 5)] == [b"t%d" % i for i in range(5, 10)]
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        assert len(drain(consumer, 10)) == 10
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 10
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}


def test_auto_offset_reset_latest_and_none(cluster):
    cluster.admin.create_topic("resets", 1)
    produce(cluster.address, "resets", [b"old"] * 5)
    tp = TopicPartition("resets", 0)
    with Consumer(cluster.address, auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 5
        produce(cluster.address, "resets", [b"new"])
        assert [r.value for r in drain(consumer, 1)] == [b"new"]
    with Consumer(cluster.address, group_id="nobody", auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(NoOffsetForPartitionError, match="no committed offset for resets-0"):
            consumer.poll(timeout_ms=100)


def test_an_offset_outside_the_log_is_reset_by_the_policy(cluster):
    cluster.admin.create_topic("outside", 1)
    produce(cluster.address, "outside", [b"a", b"b"])
    tp = TopicPartition("outside", 0)
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        assert [r.value for r in drain(consumer, 2)] == [b"a", b"b"]


def test_an_out_of_range_answer_the_leader_no_longer_confirms_keeps_the_position(cluster):
    """OFFSET_OUT_OF_RANGE resets a position only when the leader, asked when the consumer
    handles it, confirms it: here the answer was true when given, and by the time the
    consumer handles it the log has grown past the position (as when a replica that is not
    the leader's log answered), so the position is kept instead of re-reading from 0."""
    cluster.admin.create_topic("regrown", 1)
    produce(cluster.address, "regrown", [b"early-%d" % i for i in range(5)])
    tp = TopicPartition("regrown", 0)
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 20)
        fetcher = consumer._fetcher  # the fetch thread records the answer for the next poll
        assert wait_until(lambda: any(s.error is not None for s in fetcher.states.values()))
        produce(cluster.address, "regrown", [b"later-%d" % i for i in range(30)])
        records = drain(consumer, 15)
    assert [r.offset for r in records] == list(range(20, 35))
    assert records[0].value == b"later-15"


@pytest.mark.parametrize(
    "config, message",
    [
        ({"fetch_max_wait": 5}, "unknown ConsumerConfig setting 'fetch_max_wait'"),
        ({"auto_offset_reset": "smallest"}, "auto_offset_reset must be one of"),
        (
            {"group_id": "g", "heartbeat_interval_ms": 5000, "session_timeout_ms": 5000},
            "heartbeat_interval_ms .* must be lower than session_timeout_ms",
        ),
        ({"enable_auto_commit": True}, "enable_auto_commit needs a group_id"),
        ({"partition_assignment_strategy": "sticky"}, "partition_assignment_strategy must list"),
        ({"max_poll_records": 0}, "max_poll_records must be at least 1"),
        ({"group_id": ""}, "group_id must not be empty"),
    ],
)
def test_bad_consumer_configs_are_refused(config, message):
    with pytest.raises(InvalidConfigError, match=message):
        Consumer("127.0.0.1:1", **config)


def _corrupt_second_batch(log) -> int:
    """Flip a byte inside the second batch's records on disk; its base offset."""
    path = log.active_segment.log.path
    data = bytearray(path.read_bytes())
    first_length = int.from_bytes(data[8:12], "big")
    second = 12 + first_length
    second_length = int.from_bytes(data[second + 8 : second + 12], "big")
    data[second + 12 + second_length - 1] ^= 0xFF
    with open(path, "r+b") as f:
        f.seek(second)
        f.write(data[second : second + 12 + second_length])
    return int.from_bytes(data[second : second + 8], "big")


def test_a_corrupt_batch_raises_at_its_offset_every_poll_and_skips_nothing(cluster):
    cluster.admin.create_topic("damaged", 1)
    for start in (0, 10, 20):  # three batches of ten records
        cluster.client.produce(
            "damaged", {0: make_batch([b"%d" % i for i in range(start, start + 10)])}
        )
    corrupt_offset = _corrupt_second_batch(cluster.log("damaged", 0))
    assert corrupt_offset == 10
    tp = TopicPartition("damaged", 0)
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        before = drain(consumer, 10)
        assert [r.value for r in before] == [b"%d" % i for i in range(10)]
        for _ in range(3):  # the same error for the same offset, every time
            with pytest.raises(CorruptRecordError, match="offset 10"):
                drain(consumer, 1, timeout_s=10)
            assert consumer.position(tp) == 10
        consumer.seek(tp, 20)
        assert [r.value for r in drain(consumer, 10)] == [b"%d" % i for i in range(20, 30)]


def test_kafka_python_and_confluent_names_serializers_and_consumer_timeout(cluster):
    import json

    cluster.admin.create_topic("docs", 1)
    with Producer(
        bootstrap_servers=[cluster.address],
        value_serializer=lambda v: json.dumps(v).encode(),
        key_serializer=lambda k: None if k is None else k.encode(),
        **{"queue.buffering.max.ms": 0, "enable.idempotence": False},
    ) as producer:
        assert producer.config.linger_ms == 0
        producer.send("docs", {"n": 1}, key="a").get(timeout=10)
        producer.send("docs", {"n": 2}).get(timeout=10)
    with Consumer(
        **{"bootstrap.servers": cluster.address},
        auto_offset_reset="earliest",
        value_deserializer=lambda v: json.loads(v),
        key_deserializer=lambda k: None if k is None else k.decode(),
        consumer_timeout_ms=3000,  # from before the first fetch, on a machine maybe busy
    ) as consumer:
        consumer.assign([TopicPartition("docs", 0)])
        started = time.monotonic()
        got = [(r.key, r.value) for r in consumer]  # ends 3 s after the last record
        assert got == [("a", {"n": 1}), (None, {"n": 2})]
        assert time.monotonic() - started < 15
    with pytest.raises(InvalidConfigError, match="given twice"):
        Consumer(cluster.address, bootstrap_servers=cluster.address)
    with pytest.raises(InvalidConfigError, match="conflicts with acks=1"):
        Producer(cluster.address, enable_idempotence=True, acks=1)
    with pytest.raises(InvalidConfigError, match="value_serializer must be a callable"):
        Producer(cluster.address, value_serializer="json")
