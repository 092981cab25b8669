"""The client frictions of issue 30, each as a ported program or an operator met it, against
one real cluster (in-process gateway and nodes on loopback): kafka-python's shapes (poll's
dict, metrics(), subscribe with a pattern and a rebalance listener, paused(), highwater()),
a deleted topic seen by a producer and by a following consumer, Ctrl-C in `seglog produce`.
kafka-python, through the gateway's Kafka listener, is the second implementation of poll."""

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from seglog.client import Consumer, Producer, TopicPartition
from seglog.client.metadata import MetadataTimeoutError
from seglog.client.subscriptions import ConsumerRebalanceListener
from seglog.errors import SeglogError
from tests.cluster import LocalCluster
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("frictions"), nodes=3)
    yield c
    c.close()


def produce(cluster, topic, count, partitions):
    with Producer(cluster.address, linger_ms=0) as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), partition=i % partitions)
        producer.flush(timeout=30)


def read_by_partition(poll, expected):
    """{(topic, partition): [offsets]} from `poll()` answers until `expected` records."""
    got: dict[tuple[str, int], list[int]] = {}
    deadline = time.monotonic() + 30
    while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
        for tp, records in poll().items():
            got.setdefault(tuple(tp), []).extend(r.offset for r in records)
    return got


def test_poll_answers_a_dict_by_partition_as_kafka_pythons(cluster):
    cluster.admin.create_topic("shapes", 2)
    produce(cluster, "shapes", 40, 2)
    partitions = [TopicPartition("shapes", 0), TopicPartition("shapes", 1)]
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign(partitions)
        first = {}
        assert wait_until(lambda: first.update(consumer.poll(timeout_ms=200)) or first)
        # The friction: a list here broke `for tp, records in consumer.poll().items()`.
        assert isinstance(first, dict)
        assert all(isinstance(tp, TopicPartition) for tp in first)
        assert all(isinstance(records, list) and records for records in first.values())
        consumer.seek_to_beginning()
        ours = read_by_partition(lambda: consumer.poll(timeout_ms=200, max_records=7), 40)
        consumer.seek_to_beginning()
        flat = []
        assert wait_until(
            lambda: flat.extend(consumer.poll_records(timeout_ms=200)) or len(flat) >= 40
        )
    kafka = KafkaConsumer(
        bootstrap_servers=cluster.kafka_address, auto_offset_reset="earliest", group_id=None
    )
    try:
        kafka.assign([KafkaTopicPartition("shapes", p) for p in range(2)])
        theirs = read_by_partition(lambda: kafka.poll(timeout_ms=200, max_records=7), 40)
    finally:
        kafka.close()
    assert ours == theirs == {("shapes", p): list(range(20)) for p in range(2)}
    assert sorted((r.partition, r.offset) for r in flat) == sorted(
        (p, o) for (_, p), offsets in ours.items() for o in offsets
    )


def test_a_positional_float_timeout_is_refused_not_taken_as_milliseconds(cluster):
    cluster.admin.create_topic("float-poll", 1)
    with Consumer(cluster.address) as consumer:
        consumer.assign([TopicPartition("float-poll", 0)])
        with pytest.raises(TypeError, match=r"poll\(timeout_ms=1000\)"):
            consumer.poll(1.0)  # confluent-kafka's seconds: waited 1 ms before
        with pytest.raises(TypeError, match="twice"):
            consumer.poll(100, timeout_ms=100)
        assert consumer.poll(50) == {}  # kafka-python's positional milliseconds
        assert consumer.poll(timeout_ms=12.5) == {}  # a computed float, by name


def test_producer_metrics_is_a_call_answering_groups_of_metrics(cluster):
    with Producer(cluster.address) as producer:
        metrics = producer.metrics()  # a property before: metrics() raised TypeError
        assert set(metrics) == {"producer-metrics"}
        group = metrics["producer-metrics"]
        assert group["buffer-available-bytes"] == group["buffer-total-bytes"] == 32 * 1024 * 1024
        assert group["requests-in-flight"] == 0
        assert group["producer-id-resets"] == 0


class Recorder(ConsumerRebalanceListener):
    def __init__(self):
        self.events = []

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", frozenset(assigned)))


def test_pattern_subscription_with_a_rebalance_listener_follows_new_topics(cluster):
    cluster.admin.create_topic("pat-a", 2)
    cluster.admin.create_topic("pat-b", 1)
    cluster.admin.create_topic("pat-a-not", 1)  # `pat-.` would match its prefix only
    cluster.admin.create_topic("other", 1)
    listener = Recorder()
    with Consumer(
        cluster.address,
        group_id="pattern-group",
        auto_offset_reset="earliest",
        metadata_max_age_ms=300,
    ) as consumer:
        with pytest.raises(SeglogError, match="not both"):
            consumer.subscribe(["other"], pattern="pat-.")
        with pytest.raises(TypeError, match="ConsumerRebalanceListener"):
            consumer.subscribe(pattern="pat-.", listener=object())
        consumer.subscribe(pattern="pat-.", listener=listener)
        first = {TopicPartition("pat-a", 0), TopicPartition("pat-a", 1), TopicPartition("pat-b", 0)}
        assert wait_until(
            lambda: consumer.poll(timeout_ms=50) is not None and consumer.assignment() == first
        )
        assert consumer.subscription() == {"pat-a", "pat-b"}
        assert listener.events[-1] == ("assigned", frozenset(first))
        assert ("revoked", frozenset()) in listener.events

        cluster.admin.create_topic("pat-c", 1)
        produce(cluster, "pat-c", 3, 1)
        grown = first | {TopicPartition("pat-c", 0)}
        values = []
        assert wait_until(
            lambda: (
                values.extend(r.value for r in consumer.poll_records(timeout_ms=50))
                or len(values) >= 3
            ),
            timeout_s=30,
        ), f"assignment {consumer.assignment()}, events {listener.events}"
        assert sorted(values) == [b"v0", b"v1", b"v2"]
        assert consumer.assignment() == grown
        assert ("revoked", frozenset(first)) in listener.events
        assert listener.events[-1] == ("assigned", frozenset(grown))
    assert listener.events[-1] == ("revoked", frozenset(grown))  # close gives them back


def test_paused_and_highwater(cluster):
    cluster.admin.create_topic("marks", 1)
    produce(cluster, "marks", 5, 1)
    tp = TopicPartition("marks", 0)
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert consumer.highwater(tp) is None  # no fetch answer yet
        assert consumer.paused() == set()
        assert wait_until(lambda: consumer.poll(timeout_ms=100) and consumer.highwater(tp) == 5)
        consumer.pause(tp)
        assert consumer.paused() == {tp}
        consumer.resume(tp)
        assert consumer.paused() == set()
        with pytest.raises(SeglogError, match="not assigned"):
            consumer.highwater(TopicPartition("marks", 1))


def warnings_from(caplog, logger_name, text):
    return [
        r
        for r in caplog.records
        if r.name == logger_name and r.levelno >= logging.WARNING and text in r.getMessage()
    ]


def test_a_deleted_topic_fails_sends_and_is_logged_once(cluster, caplog):
    caplog.set_level(logging.DEBUG, logger="seglog.client")
    cluster.admin.create_topic("doomed", 1)
    with Producer(
        cluster.address,
        linger_ms=0,
        request_timeout_ms=1000,
        delivery_timeout_ms=2500,
        max_block_ms=1000,
    ) as producer:
        producer.send("doomed", b"before", key=b"k").get(timeout=10)
        cluster.admin.delete_topic("doomed")
        accepted = []
        refused = []

        def send_once():
            try:
                accepted.append(producer.send("doomed", b"after", key=b"k"))
            except MetadataTimeoutError as exc:
                refused.append(exc)
            return refused

        # The friction: send() went on accepting records for the deleted topic, forever.
        assert wait_until(send_once, timeout_s=30), f"{len(accepted)} records accepted"
        assert "'doomed' not present in metadata after 1000 ms" in str(refused[0])
        assert "does not exist" in str(refused[0])
        # What was accepted before the producer learnt of the deletion fails, by
        # delivery_timeout_ms at the latest, instead of waiting for ever.
        for future in accepted:
            assert future.exception(timeout=30) is not None
    refreshes = warnings_from(caplog, "seglog.client.sender", "metadata refresh")
    # Before: one line per failed refresh, every retry_backoff_ms (100 ms) for seconds.
    assert 1 <= len(refreshes) <= 3, [r.getMessage() for r in refreshes]
    assert "doomed" in refreshes[0].getMessage()


def test_a_following_consumer_says_once_that_its_topic_is_gone(cluster, caplog):
    caplog.set_level(logging.DEBUG, logger="seglog.client")
    cluster.admin.create_topic("vanishing", 1)
    produce(cluster, "vanishing", 3, 1)
    with Consumer(cluster.address, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition("vanishing", 0)])
        got = []
        assert wait_until(lambda: got.extend(c.poll_records(timeout_ms=100)) or len(got) >= 3)
        cluster.admin.delete_topic("vanishing")
        # The friction: nothing was logged, ever, while the consumer retried.
        assert wait_until(
            lambda: (
                c.poll_records(timeout_ms=100) == []
                and warnings_from(caplog, "seglog.client.fetcher", "vanishing")
            ),
            timeout_s=30,
        )
        logged_at = time.monotonic()
        while time.monotonic() - logged_at < 3:  # keeps retrying, quietly
            assert c.poll_records(timeout_ms=200) == []
    lines = [r.getMessage() for r in warnings_from(caplog, "seglog.client.fetcher", "fetching")]
    assert len(lines) == 1, lines
    assert "vanishing" in lines[0]


def test_ctrl_c_in_seglog_produce_exits_130_with_one_line(cluster):
    cluster.admin.create_topic("interrupted", 1)
    env = {**os.environ, "SEGLOG_BOOTSTRAP": cluster.address}
    process = subprocess.Popen(
        [sys.executable, "-m", "seglog.cli.main", "produce", "interrupted", "--linger-ms", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        process.stdin.write(b"one\ntwo\nthree\n")
        process.stdin.flush()
        end = TopicPartition("interrupted", 0)
        with Consumer(cluster.address) as consumer:
            assert wait_until(lambda: consumer.end_offsets([end])[end] == 3, timeout_s=30)
        process.send_signal(signal.SIGINT)  # while it waits for more lines
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # Before: a KeyboardInterrupt traceback (and a second one, chained, from close()).
    assert process.returncode == 130, err.decode()
    assert b"Traceback" not in err
    assert err.decode().strip().splitlines() == [
        "seglog: interrupted: 3 records of 3 sent to interrupted acknowledged"
    ]


def test_with_the_cluster_down_clients_log_once_and_records_expire(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="seglog.client")
    down = LocalCluster(tmp_path, nodes=1)
    try:
        down.admin.create_topic("stranded", 1)
        tp = TopicPartition("stranded", 0)
        producer = Producer(
            down.address, linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=2500
        )
        consumer = Consumer(down.address, auto_offset_reset="earliest", fetch_max_wait_ms=100)
        producer.send("stranded", b"before", key=b"k").get(timeout=10)
        consumer.assign([tp])
        assert wait_until(lambda: consumer.poll_records(timeout_ms=100))
    finally:
        down.close()
    try:
        # Kafka's behaviour for a known topic: accepted into the buffer, failed by
        # delivery_timeout_ms; before, the failed refresh was logged every 100 ms meanwhile.
        futures = [producer.send("stranded", b"during", key=b"k") for _ in range(5)]
        for future in futures:
            assert future.exception(timeout=30) is not None
        # The consumer, silent before, says once that it cannot fetch, and keeps trying.
        assert wait_until(
            lambda: (
                consumer.poll_records(timeout_ms=100) == []
                and warnings_from(caplog, "seglog.client.fetcher", "fetching")
            ),
            timeout_s=30,
        )
        logged_at = time.monotonic()
        while time.monotonic() - logged_at < 3:
            assert consumer.poll_records(timeout_ms=200) == []
    finally:
        producer.close(timeout=0)
        consumer.close()
    refreshes = warnings_from(caplog, "seglog.client.sender", "metadata refresh")
    assert 1 <= len(refreshes) <= 3, [r.getMessage() for r in refreshes]
    fetching = warnings_from(caplog, "seglog.client.fetcher", "fetching")
    assert len(fetching) == 1, [r.getMessage() for r in fetching]


def test_a_group_member_says_once_that_its_subscribed_topic_is_gone(cluster, caplog):
    caplog.set_level(logging.INFO, logger="seglog.client")
    cluster.admin.create_topic("sub-vanishing", 1)
    with Consumer(cluster.address, group_id="vanishing-group") as consumer:
        consumer.subscribe(["sub-vanishing"])
        assert wait_until(
            lambda: consumer.poll(timeout_ms=50) is not None and consumer.assignment()
        )
        assert not warnings_from(caplog, "seglog.client.subscriptions", "do not exist")
        cluster.admin.delete_topic("sub-vanishing")
        # The friction: the group rebalanced the partition away and nothing was said.
        assert wait_until(
            lambda: (
                consumer.poll(timeout_ms=50) == {}
                and not consumer.assignment()
                and warnings_from(caplog, "seglog.client.subscriptions", "do not exist")
            ),
            timeout_s=30,
        )
        for _ in range(5):
            assert consumer.poll(timeout_ms=50) == {}
    lines = [
        r.getMessage() for r in warnings_from(caplog, "seglog.client.subscriptions", "do not exist")
    ]
    assert lines == [
        "subscribed topics ['sub-vanishing'] do not exist (deleted, or not created yet): "
        "nothing is read from them until they are created"
    ]


def test_ctrl_c_in_seglog_produce_with_the_cluster_down_is_not_ignored(tmp_path):
    down = LocalCluster(tmp_path, nodes=1)
    process = None
    try:
        down.admin.create_topic("stuck", 1)
        env = {**os.environ, "SEGLOG_BOOTSTRAP": down.address}
        process = subprocess.Popen(
            [sys.executable, "-m", "seglog.cli.main", "produce", "stuck", "--linger-ms", "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        process.stdin.write(b"one\ntwo\n")
        process.stdin.flush()
        end = TopicPartition("stuck", 0)
        with Consumer(down.address) as consumer:
            assert wait_until(lambda: consumer.end_offsets([end])[end] == 2, timeout_s=30)
    finally:
        down.close()
    try:
        lines: list[str] = []
        reader = threading.Thread(
            target=lambda: lines.extend(line.decode() for line in process.stderr)
        )
        reader.start()
        process.stdin.write(b"three\n")  # queued: nobody to send it to
        process.stdin.flush()
        # It was read and queued once the sender says it cannot reach the cluster.
        assert wait_until(lambda: any("metadata refresh failed" in line for line in lines), 30), (
            lines
        )
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # Before: the first Ctrl-C hung in close() for ever, the second printed two tracebacks.
    assert process.returncode == 130, lines
    assert time.monotonic() - started < 30  # the flush is bounded (5 s)
    assert not any("Traceback" in line for line in lines), lines
    assert lines[-1].strip() == "seglog: interrupted: 2 records of 3 sent to stuck acknowledged"
    assert sum("interrupted" in line for line in lines) == 1, lines
