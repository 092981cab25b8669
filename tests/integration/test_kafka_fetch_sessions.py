"""Kafka's Fetch v13–v17 at the protocol level (kafka-python's codec over a socket): topics by
id (KIP-516) and clients' fetch sessions (KIP-227) as Kafka's broker keeps them: a full
request opens a session, incremental requests are answered only the partitions with news,
forgotten partitions are no longer fetched, a wrong epoch or an unknown session is refused,
a full cache makes no session and evicts as Kafka does, an unknown topic id and a recreated
topic's old id answer UNKNOWN_TOPIC_ID; and a partition whose leader moved names the new
leader and its endpoint (KIP-951)."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from seglog.client.producer import Producer
from services.gateway.kafka import error_codes
from services.gateway.kafka.apis import kafka_api_table
from services.gateway.kafka.brokers import broker_view
from services.gateway.kafka.fetch_sessions import FetchSessionSettings
from services.gateway.kafka.listener import KafkaListener, ListenerLimits
from services.gateway.kafka.topic_ids import ZERO, to_wire
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_until

V = 17
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
FENCED_LEADER_EPOCH = 74
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("kafka-fetch-sessions"), nodes=2)
    yield c
    c.close()


def produce(cluster, topic, partition, count):
    with Producer(cluster.address, linger_ms=0, acks="all") as producer:
        for future in [producer.send(topic, b"v%d" % i, partition=partition) for i in range(count)]:
            future.get(timeout=20)


def topic_id(cluster, topic):
    return to_wire(cluster.gateway.registry.topic(topic).topic_id)


def fetch(wire, topics, *, session_id=0, epoch=-1, forgotten=(), version=V, leader_epoch=-1):
    """`topics`: {topic id (or name below v13): {partition: fetch offset}}."""
    fetch_topic = FetchRequest.FetchTopic
    by_id = version >= 13

    def named(topic, **fields):
        return dict(topic_id=topic, **fields) if by_id else dict(topic=topic, **fields)

    request = FetchRequest[version](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            fetch_topic(
                **named(
                    topic,
                    partitions=[
                        fetch_topic.FetchPartition(
                            partition=p,
                            current_leader_epoch=leader_epoch,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        )
                        for p, offset in partitions.items()
                    ],
                )
            )
            for topic, partitions in topics.items()
        ],
        forgotten_topics_data=[
            FetchRequest.ForgottenTopic(**named(topic, partitions=list(ps)))
            for topic, ps in forgotten
        ],
        rack_id="",
    )
    return wire.request(request, version, FetchResponse)


def answered(response, version=V):
    """{(topic id or name, partition): (error, high watermark, record bytes)}."""
    return {
        ((t.topic_id or ZERO) if version >= 13 else t.topic, p.partition_index): (
            p.error_code,
            p.high_watermark,
            len(p.records or b""),
        )
        for t in response.responses
        for p in t.partitions
    }


def test_incremental_fetches_answer_only_partitions_with_news(cluster):
    cluster.admin.create_topic("sessions", 3, 1)
    produce(cluster, "sessions", 0, 3)
    produce(cluster, "sessions", 1, 2)
    tid = topic_id(cluster, "sessions")
    with KafkaWire(cluster.kafka_address) as wire:
        full = fetch(wire, {tid: {0: 0, 1: 0, 2: 0}}, epoch=0)
        assert full.error_code == 0 and full.session_id != 0
        first = answered(full)
        assert {k: v[:2] for k, v in first.items()} == {
            (tid, 0): (0, 3),
            (tid, 1): (0, 2),
            (tid, 2): (0, 0),
        }
        assert first[(tid, 0)][2] > 0 and first[(tid, 1)][2] > 0 and first[(tid, 2)][2] == 0
        session = full.session_id
        # The client moves its offsets on: nothing new anywhere, so no partition is answered.
        same = fetch(wire, {tid: {0: 3, 1: 2}}, session_id=session, epoch=1)
        assert (same.error_code, same.session_id, answered(same)) == (0, session, {})
        produce(cluster, "sessions", 2, 1)
        news = fetch(wire, {}, session_id=session, epoch=2)
        assert {k: v[:2] for k, v in answered(news).items()} == {(tid, 2): (0, 1)}
        # Forgotten: partition 2 is fetched no more, so its news is not answered.
        forgot = fetch(wire, {}, session_id=session, epoch=3, forgotten=[(tid, [2])])
        assert answered(forgot) == {}  # partition 2 still at offset 0 had records: forgotten
        produce(cluster, "sessions", 2, 1)
        produce(cluster, "sessions", 0, 1)
        after = fetch(wire, {}, session_id=session, epoch=4)
        assert {k: v[:2] for k, v in answered(after).items()} == {(tid, 0): (0, 4)}
    assert cluster.gateway.kafka_listener.fetch_sessions.created_with_topic_ids >= 1


def test_a_wrong_epoch_an_unknown_session_and_a_version_change_are_refused(cluster):
    cluster.admin.create_topic("session-errors", 1, 1)
    tid = topic_id(cluster, "session-errors")
    with KafkaWire(cluster.kafka_address) as wire:
        session = fetch(wire, {tid: {0: 0}}, epoch=0).session_id
        assert session != 0
        wrong = fetch(wire, {}, session_id=session, epoch=5)
        assert (wrong.error_code, wrong.session_id, wrong.responses) == (
            INVALID_FETCH_SESSION_EPOCH,
            0,
            [],
        )
        unknown = fetch(wire, {}, session_id=session ^ 0x5A5A, epoch=1)
        assert unknown.error_code == error_codes.FETCH_SESSION_ID_NOT_FOUND
        by_name = fetch(wire, {}, session_id=session, epoch=1, version=12)
        assert by_name.error_code == FETCH_SESSION_TOPIC_ID_ERROR
        # None of the refusals moved the epoch on.
        assert fetch(wire, {}, session_id=session, epoch=1).error_code == 0
        # A sessionless request naming the session closes it.
        fetch(wire, {tid: {0: 0}}, session_id=session, epoch=-1)
        closed = fetch(wire, {}, session_id=session, epoch=2)
        assert closed.error_code == error_codes.FETCH_SESSION_ID_NOT_FOUND


def test_an_unknown_id_and_a_recreated_topics_old_id_answer_unknown_topic_id(cluster):
    cluster.admin.create_topic("made-again", 1, 1)
    produce(cluster, "made-again", 0, 2)
    old = topic_id(cluster, "made-again")
    with KafkaWire(cluster.kafka_address) as wire:
        session = fetch(wire, {old: {0: 0}, ZERO: {0: 0}}, epoch=0)
        assert answered(session)[(ZERO, 0)][0] == error_codes.UNKNOWN_TOPIC_ID
        assert answered(session)[(old, 0)][:2] == (0, 2)
        cluster.admin.delete_topic("made-again")
        cluster.admin.create_topic("made-again", 1, 1)
        produce(cluster, "made-again", 0, 5)
        new = topic_id(cluster, "made-again")
        assert new != old
        stale = answered(fetch(wire, {old: {0: 0}}))
        assert stale == {(old, 0): (error_codes.UNKNOWN_TOPIC_ID, -1, 0)}
        in_session = fetch(wire, {}, session_id=session.session_id, epoch=1)
        assert answered(in_session) == {
            (old, 0): (error_codes.UNKNOWN_TOPIC_ID, -1, 0),
            (ZERO, 0): (error_codes.UNKNOWN_TOPIC_ID, -1, 0),
        }
        fresh = answered(fetch(wire, {new: {0: 0}}))
        assert fresh[(new, 0)][:2] == (0, 5) and fresh[(new, 0)][2] > 0


@pytest.fixture
def small_cache_listener(cluster):
    """A second listener on the gateway keeping two sessions, every session evictable and
    stale as soon as a millisecond has passed."""
    listener = KafkaListener(
        "127.0.0.1:0",
        kafka_api_table(),
        cluster.gateway.kafka_core,
        max_request_bytes=cluster.gateway.config.max_request_bytes,
        limits=ListenerLimits(fetch_sessions=FetchSessionSettings(2, 0)),
    )
    listener.start()
    yield listener
    listener.stop()


def test_a_full_cache_evicts_the_least_recently_used_stale_session(cluster, small_cache_listener):
    cluster.admin.create_topic("few-slots", 1, 1)
    tid = topic_id(cluster, "few-slots")
    sessions = small_cache_listener.fetch_sessions
    clock = sessions._clock_ms

    def next_millisecond() -> None:
        now = clock()
        assert wait_until(lambda: clock() > now)

    with KafkaWire(small_cache_listener.address) as wire:
        first = fetch(wire, {tid: {0: 0}}, epoch=0).session_id
        second = fetch(wire, {tid: {0: 0}}, epoch=0).session_id
        assert first and second and first != second
        next_millisecond()
        assert fetch(wire, {}, session_id=first, epoch=1).error_code == 0  # second is LRU now
        next_millisecond()
        third = fetch(wire, {tid: {0: 0}}, epoch=0).session_id
        assert third not in (0, first, second)
        gone = fetch(wire, {}, session_id=second, epoch=1)
        assert gone.error_code == error_codes.FETCH_SESSION_ID_NOT_FOUND
        assert fetch(wire, {}, session_id=first, epoch=2).error_code == 0
    assert sorted(sessions.session_ids()) == sorted([first, third])


def test_a_full_cache_with_nothing_evictable_answers_sessionless(cluster):
    listener = KafkaListener(
        "127.0.0.1:0",
        kafka_api_table(),
        cluster.gateway.kafka_core,
        max_request_bytes=cluster.gateway.config.max_request_bytes,
        limits=ListenerLimits(fetch_sessions=FetchSessionSettings(1)),
    )
    listener.start()
    try:
        cluster.admin.create_topic("one-slot", 2, 1)
        tid = topic_id(cluster, "one-slot")
        with KafkaWire(listener.address) as wire:
            kept = fetch(wire, {tid: {0: 0}}, epoch=0).session_id
            refused = fetch(wire, {tid: {0: 0, 1: 0}}, epoch=0)
            assert kept != 0 and refused.session_id == 0 and refused.error_code == 0
            assert len(answered(refused)) == 2  # a sessionless answer, whole
            assert fetch(wire, {}, session_id=kept, epoch=1).error_code == 0
    finally:
        listener.stop()


def test_a_fenced_fetch_names_the_current_leader_and_its_endpoint(cluster):
    cluster.admin.create_topic("moved", 1, 2)
    produce(cluster, "moved", 0, 1)
    registry = cluster.gateway.registry
    before = registry.route("moved", 0)
    cluster.stop_node(before.leader)
    try:
        assert wait_until(lambda: registry.route("moved", 0).leader != before.leader, 30)
        now = registry.route("moved", 0)
        tid = topic_id(cluster, "moved")
        with KafkaWire(cluster.kafka_address) as wire:
            assert wait_until(lambda: answered(fetch(wire, {tid: {0: 0}}))[(tid, 0)][0] == 0, 30)
            fenced = fetch(wire, {tid: {0: 0}}, leader_epoch=before.leader_epoch)
        (partition,) = fenced.responses[0].partitions
        # The node refuses a fetch routed by an epoch it does not lead as NOT_LEADER.
        assert partition.error_code in (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH)
        view = broker_view(cluster.gateway.kafka_core)
        leader = view.leader("moved", 0, now.leader)
        assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (
            leader,
            now.leader_epoch,
        )
        (endpoint,) = fenced.node_endpoints
        (broker,) = [b for b in view.brokers if b.node_id == leader]
        assert (endpoint.node_id, endpoint.host, endpoint.port) == (
            leader,
            broker.host,
            broker.port,
        )
    finally:
        cluster.start_node(before.leader)
    assert wait_until(lambda: before.leader in registry.live_nodes(), 30)


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level, message, *args) -> None:
        self.lines.append(message % args if args else message)


def test_librdkafka_reads_every_record_once_fetching_by_topic_id(cluster):
    """librdkafka (2.16) fetches at v16, by topic id, sessionless (it keeps no sessions)."""
    cluster.admin.create_topic("by-id-rdkafka", 2, 1)
    produce(cluster, "by-id-rdkafka", 0, 10)
    produce(cluster, "by-id-rdkafka", 1, 10)
    log = _Log()
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": "by-id-rdkafka",
            "auto.offset.reset": "earliest",
            "debug": "protocol",
            "logger": log,
        }
    )
    read = []
    try:
        consumer.subscribe(["by-id-rdkafka"])
        deadline = time.monotonic() + 30
        while len(read) < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read.append((message.partition(), message.offset()))
    finally:
        consumer.close()
    assert sorted(read) == [(p, o) for p in (0, 1) for o in range(10)]
    assert any("Sent FetchRequest (v16" in line for line in log.lines)
