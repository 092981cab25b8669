"""The consumer against a real in-process cluster: reading, seeking, resets, compression,
consumer groups and committed offsets."""

import threading
import time

import grpc
import pytest

from seglog.client.consumer import Consumer, NoOffsetForPartitionError
from seglog.client.membership import CommitFailedError
from seglog.client.producer import Producer
from seglog.client.structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from seglog.errors import CorruptRecordError, InvalidConfigError
from seglog.records import CREATE_TIME
from seglog.v1 import common_pb2, groups_pb2, groups_pb2_grpc
from tests.authorizer_modes import AUTHORIZER_MODES
from tests.batches import make_batch
from tests.cluster import drain
from tests.waiting import wait_until

# The group tests run with the authorizer off and on (conftest's cluster, GROUP_GRANTS).
BOTH_AUTHORIZER_MODES = pytest.mark.parametrize("cluster", AUTHORIZER_MODES, indirect=True)
GROUP_CONFIG = {"session_timeout_ms": 1500, "heartbeat_interval_ms": 100}


def produce(address, topic, values, **send):
    with Producer(address, linger_ms=0) as producer:
        futures = [producer.send(topic, v, **send) for v in values]
        return [f.get(timeout=10) for f in futures]


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


@BOTH_AUTHORIZER_MODES
def test_manual_commits_and_committed_offsets(cluster):
    cluster.admin.create_topic("ledger", 2)
    produce(cluster.address, "ledger", [b"x"] * 10, partition=0)
    tp0, tp1 = TopicPartition("ledger", 0), TopicPartition("ledger", 1)
    config = dict(group_id="auditors", auto_offset_reset="earliest", enable_auto_commit=False)
    with Consumer(cluster.address, **config) as consumer:
        consumer.assign([tp0, tp1])
        assert consumer.committed([tp0, tp1]) == {tp0: None, tp1: None}
        assert len(drain(consumer, 10)) == 10
        consumer.commit()
        assert consumer.committed(tp0)[tp0].offset == 10
        consumer.commit({tp1: OffsetAndMetadata(0, "checkpoint")})
        assert consumer.committed(tp1) == {tp1: OffsetAndMetadata(0, "checkpoint", -1)}
        done = []
        consumer.commit_async({tp0: 4}, callback=lambda offsets, exc: done.append(exc)).result(10)
        assert done == [None] and consumer.committed(tp0)[tp0].offset == 4
    with Consumer(cluster.address, **config) as again:
        again.assign([tp0])
        assert [r.offset for r in drain(again, 6)] == list(range(4, 10))


@BOTH_AUTHORIZER_MODES
def test_committed_offsets_survive_a_gateway_restart(cluster):
    cluster.admin.create_topic("durable", 3)
    tps = [TopicPartition("durable", p) for p in range(3)]
    config = dict(group_id="keepers", enable_auto_commit=False)
    with Consumer(cluster.address, **config) as consumer:
        consumer.assign(tps)
        consumer.commit({tp: 100 + tp.partition for tp in tps})
        consumer.commit({tps[0]: 7})  # the newer commit wins after the read-back
    cluster.restart_gateway()
    assert wait_until(lambda: len(cluster.admin.describe_cluster().nodes) == 3)
    with Consumer(cluster.address, **config) as consumer:
        committed = consumer.committed(tps)
    assert {tp: meta.offset for tp, meta in committed.items()} == {
        tps[0]: 7,
        tps[1]: 101,
        tps[2]: 102,
    }
    offsets_log = cluster.log("__consumer_offsets", 0)
    assert offsets_log.config.cleanup_policy == "compact"


@BOTH_AUTHORIZER_MODES
def test_three_consumers_share_a_topic_and_rebalance_when_one_leaves(cluster):
    cluster.admin.create_topic("shared", 6)
    total = 3000
    produce_values = [b"%d" % i for i in range(total)]
    with Producer(cluster.address) as producer:
        for i, value in enumerate(produce_values):
            producer.send("shared", value, partition=i % 6)

    seen: dict[int, list[bytes]] = {}  # generation -> values read in it
    lock = threading.Lock()
    stop = threading.Event()
    leaver_reading = threading.Event()
    leaver_done = threading.Event()

    def member(name, leave_after):
        consumer = Consumer(
            cluster.address,
            group_id="sharers",
            client_id=name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_records=50,
            **GROUP_CONFIG,
        )
        consumer.subscribe(["shared"])
        read = 0
        first_generation = None
        try:
            while not stop.is_set():
                records = consumer.poll_records(timeout_ms=100)
                if first_generation not in (None, consumer.generation) and consumer.paused():
                    consumer.resume(*consumer.paused())  # the others joined: read beside them
                if not records:
                    continue
                generation = consumer.generation
                try:
                    consumer.commit()
                except CommitFailedError:
                    continue  # another member owns these now and reads them from the commit
                with lock:
                    seen.setdefault(generation, []).extend(r.value for r in records)
                if leave_after and first_generation is None:
                    # Alone in its first generation: it waits for the others before reading on.
                    first_generation = generation
                    consumer.pause(*consumer.assignment())
                    leaver_reading.set()
                elif leave_after and generation != first_generation:
                    read += len(records)
                    if read >= leave_after:
                        return  # mid-stream, in a generation it shares
                time.sleep(0.01)  # pace the reading so the rebalance lands mid-stream
        finally:
            consumer.close()
            if leave_after:
                leaver_done.set()

    # The leaver reads a batch first and waits, then the others join, and it leaves after
    # reading 100 records beside them: it keeps partitions with records enough for that,
    # however late a member's thread gets going on a busy machine.
    threads = [
        threading.Thread(target=member, args=("c", 100)),
        threading.Thread(target=member, args=("a", 0)),
        threading.Thread(target=member, args=("b", 0)),
    ]
    threads[0].start()
    assert leaver_reading.wait(30)
    for t in threads[1:]:
        t.start()
    assert leaver_done.wait(30)

    def everything_read():
        with lock:
            return len({v for values in seen.values() for v in values}) == total

    assert wait_until(everything_read, timeout_s=60)
    stop.set()
    for t in threads:
        t.join(10)
    with lock:
        generations = sorted(seen)
        # Within one generation, each record is read by exactly one member, once.
        for generation in generations:
            values = seen[generation]
            assert len(values) == len(set(values)), f"generation {generation} read twice"
        assert {v for values in seen.values() for v in values} == set(produce_values)
    assert len(generations) >= 2  # the leave made a new generation that kept reading


@BOTH_AUTHORIZER_MODES
def test_a_member_that_stops_heartbeating_is_removed(cluster):
    cluster.admin.create_topic("watched", 2)
    stub = groups_pb2_grpc.GroupCoordinatorStub(grpc.insecure_channel(cluster.address))
    silent = stub.JoinGroup(
        groups_pb2.JoinGroupRequest(
            group_id="watchers",
            client_id="silent",
            topics=["watched"],
            session_timeout_ms=500,
            rebalance_timeout_ms=5000,
            assignment_strategies=["range"],
        )
    )
    assert silent.error == 0 and silent.generation_id == 1
    assert sum(len(tp.partitions) for tp in silent.assignment) == 2
    with Consumer(cluster.address, group_id="watchers", **GROUP_CONFIG) as consumer:
        consumer.subscribe(["watched"])
        # The silent member never heartbeats: after its session timeout the group
        # rebalances and the live consumer gets every partition.
        assert wait_until(
            lambda: consumer.poll(timeout_ms=50) is not None and len(consumer.assignment()) == 2,
            timeout_s=20,
        )
        assert consumer.generation >= 2
    answer = stub.Heartbeat(
        groups_pb2.GroupHeartbeatRequest(
            group_id="watchers", member_id=silent.member_id, generation_id=1
        )
    )
    assert common_pb2.ErrorCode.Name(answer.error) == "UNKNOWN_MEMBER_ID"


@BOTH_AUTHORIZER_MODES
def test_a_consumer_that_stops_polling_leaves_the_group_until_it_polls_again(cluster):
    cluster.admin.create_topic("paced", 2)
    config = dict(
        group_id="pacers",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_interval_ms=800,
        **GROUP_CONFIG,
    )
    slow = Consumer(cluster.address, client_id="slow", **config)
    quick = Consumer(cluster.address, client_id="quick", **config)
    stop = threading.Event()

    def keep_polling():
        while not stop.is_set():
            quick.poll(timeout_ms=50)

    try:
        slow.subscribe(["paced"])
        assert wait_until(lambda: slow.poll(timeout_ms=50) is not None and slow.assignment())
        quick.subscribe(["paced"])
        poller = threading.Thread(target=keep_polling)
        poller.start()
        one_each = lambda: len(slow.assignment()) == len(quick.assignment()) == 1  # noqa: E731
        assert wait_until(lambda: slow.poll(timeout_ms=50) is not None and one_each())
        taken = slow.assignment()
        # Heartbeats go on, but no poll for longer than max_poll_interval_ms: the slow
        # consumer leaves, and the quick one is given both partitions without waiting out
        # the slow one's session.
        assert wait_until(lambda: len(quick.assignment()) == 2, timeout_s=10)
        with pytest.raises(CommitFailedError, match="max_poll_interval_ms"):
            slow.commit({tp: 0 for tp in taken})
        # Its next polls join the group again.
        assert wait_until(lambda: slow.poll(timeout_ms=50) is not None and one_each())
        slow.commit({tp: 0 for tp in slow.assignment()})
    finally:
        stop.set()
        if "poller" in locals():
            poller.join(10)
        slow.close()
        quick.close()


@pytest.mark.slow
def test_the_group_rebalances_when_a_subscribed_topic_is_created_or_deleted(cluster):
    cluster.admin.create_topic("present", 1)
    with Consumer(
        cluster.address, group_id="watchers-of-topics", auto_offset_reset="earliest", **GROUP_CONFIG
    ) as consumer:
        consumer.subscribe(["present", "later"])
        assert wait_until(
            lambda: consumer.poll(timeout_ms=50) is not None and consumer.assignment()
        )
        assert consumer.assignment() == {TopicPartition("present", 0)}
        first_generation = consumer.generation

        cluster.admin.create_topic("later", 2)
        produce(cluster.address, "later", [b"new-%d" % i for i in range(4)], partition=1)
        read = drain(consumer, 4)
        assert sorted(r.value for r in read) == [b"new-%d" % i for i in range(4)]
        assert consumer.assignment() == {
            TopicPartition("present", 0),
            TopicPartition("later", 0),
            TopicPartition("later", 1),
        }
        assert consumer.generation > first_generation

        cluster.admin.delete_topic("later")
        assert wait_until(
            lambda: (
                consumer.poll(timeout_ms=50) is not None
                and consumer.assignment() == {TopicPartition("present", 0)}
            )
        )


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
