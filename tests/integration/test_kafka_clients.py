"""Kafka's own clients against the gateway's Kafka listener, with the gRPC clients as the
other side: librdkafka (confluent-kafka) and kafka-python produce with every compression,
keys, headers and idempotence; they consume with assign, seek and offsets by time; records
cross between the two APIs both ways."""

from __future__ import annotations

import threading
import time

import confluent_kafka
import kafka
import pytest
from kafka.protocol.consumer import (
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.client.consumer import Consumer
from seglog.client.producer import Producer
from seglog.client.structs import TopicPartition
from seglog.records.batch import read_header
from services.gateway.kafka.topic_ids import to_wire
from tests.batches import make_batch
from tests.cluster import LocalCluster, drain
from tests.kafka_wire import KafkaWire, fetch_request
from tests.rdkafka import assert_read_back_in_order, produce_round_robin
from tests.rdkafka import rdkafka_consume as consume

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
TIMEOUT_S = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("kafka-clients"), nodes=3)
    yield c
    c.close()


def rdkafka_producer(cluster, **config):
    return confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_address, "linger.ms": 5, **config}
    )


def rdkafka_consume(cluster, topic, partitions, count, offset=0):
    return consume(cluster.kafka_address, topic, partitions, count, offset)


def delivered(producer):
    """Flushes; the delivery reports' errors (none expected)."""
    assert producer.flush(TIMEOUT_S) == 0


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_librdkafka_idempotent_producer_writes_every_compression_read_by_seglog_consumer(
    cluster, compression
):
    topic = f"rd-{compression}"
    cluster.admin.create_topic(topic, 2, 3)
    producer = rdkafka_producer(
        cluster, **{"enable.idempotence": True, "acks": "all", "compression.type": compression}
    )
    errors = []
    for i in range(200):
        producer.produce(
            topic,
            value=b"value-%d" % i,
            key=b"key-%d" % i,
            partition=i % 2,
            headers=[("n", b"%d" % i)],
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
    delivered(producer)
    assert errors == []
    with Consumer(cluster.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        records = drain(consumer, 200)
    assert len(records) == 200
    for partition in (0, 1):
        mine = [r for r in records if r.partition == partition]
        assert [r.offset for r in mine] == list(range(100))
        for r in mine:
            i = int(r.value.split(b"-")[1])
            assert i % 2 == partition and r.key == b"key-%d" % i
            assert r.headers == (("n", b"%d" % i),)


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_producer_writes_every_compression_read_by_librdkafka(cluster, compression):
    topic = f"kp-{compression or 'none'}"
    cluster.admin.create_topic(topic, 1, 3)
    producer = kafka.KafkaProducer(
        bootstrap_servers=cluster.kafka_address,
        compression_type=compression,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
    )
    try:
        futures = [
            producer.send(topic, value=b"v%d" % i, key=b"k%d" % i, headers=[("h", b"x")])
            for i in range(100)
        ]
        offsets = [f.get(timeout=TIMEOUT_S).offset for f in futures]
    finally:
        producer.close()
    assert offsets == list(range(100))
    messages = rdkafka_consume(cluster, topic, [0], 100)
    assert [(m.offset(), m.key(), m.value()) for m in messages] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(100)
    ]
    assert all(m.headers() == [("h", b"x")] for m in messages)


def test_seglog_producer_records_are_read_by_librdkafka(cluster):
    cluster.admin.create_topic("from-grpc", 1, 3)
    with Producer(cluster.address, linger_ms=0) as producer:
        futures = [
            producer.send("from-grpc", b"value-%d" % i, key=b"key-%d" % i, headers=[("a", b"1")])
            for i in range(50)
        ]
        assert [f.get(timeout=TIMEOUT_S).offset for f in futures] == list(range(50))
    messages = rdkafka_consume(cluster, "from-grpc", [0], 50)
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in messages] == [
        (i, b"key-%d" % i, b"value-%d" % i, [("a", b"1")]) for i in range(50)
    ]


def test_acks_zero_records_are_written(cluster):
    cluster.admin.create_topic("fire-and-forget", 1, 3)
    producer = rdkafka_producer(cluster, acks=0)
    for i in range(20):
        producer.produce("fire-and-forget", value=b"%d" % i)
    delivered(producer)
    messages = rdkafka_consume(cluster, "fire-and-forget", [0], 20)
    assert [m.value() for m in messages] == [b"%d" % i for i in range(20)]


def test_kafka_python_consumer_seeks_and_finds_offsets_by_time(cluster):
    cluster.admin.create_topic("timed", 1, 3)
    base_ms = 1_700_000_000_000
    with Producer(cluster.address, linger_ms=0) as producer:
        for i in range(30):
            producer.send("timed", b"%d" % i, timestamp_ms=base_ms + i * 1000).get(TIMEOUT_S)
    tp = kafka.TopicPartition("timed", 0)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=cluster.kafka_address, consumer_timeout_ms=5000
    )
    try:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 30}
        found = consumer.offsets_for_times({tp: base_ms + 10_500})[tp]
        assert (found.offset, found.timestamp) == (11, base_ms + 11_000)
        assert consumer.offsets_for_times({tp: base_ms + 99_000_000})[tp] is None
        consumer.seek(tp, found.offset)
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == 19:
                break
        assert values == [b"%d" % i for i in range(11, 30)]
    finally:
        consumer.close()


def test_fetch_from_a_mid_batch_offset_answers_the_whole_batch(cluster):
    cluster.admin.create_topic("batched", 1, 3)
    producer = rdkafka_producer(cluster, **{"linger.ms": 500})
    for i in range(10):
        producer.produce("batched", value=b"%d" % i)
    delivered(producer)
    with KafkaWire(cluster.kafka_address) as wire:
        request = fetch_request(12, {"batched": [0]}, fetch_offset=5)
        answer = wire.request(request, 12, FetchResponse)
    data = answer.responses[0].partitions[0]
    assert (data.error_code, data.high_watermark, data.last_stable_offset) == (0, 10, 10)
    header = read_header(data.records)
    assert (header.base_offset, header.record_count) == (0, 10)  # one batch, whole
    # librdkafka skips the batch's records before the offset asked for.
    assert [m.offset() for m in rdkafka_consume(cluster, "batched", [0], 5, offset=5)] == [
        5,
        6,
        7,
        8,
        9,
    ]


def test_long_poll_fetch_answers_when_a_record_arrives(cluster):
    cluster.admin.create_topic("long-poll", 1, 3)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": "long-poll",
            "fetch.wait.max.ms": 10_000,
            "enable.auto.commit": False,
        }
    )
    got: list[bytes] = []
    arrived = threading.Event()

    def read() -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not got:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
                arrived.set()

    consumer.assign([confluent_kafka.TopicPartition("long-poll", 0, 0)])
    reader = threading.Thread(target=read)
    reader.start()
    try:
        producer = rdkafka_producer(cluster)
        producer.produce("long-poll", value=b"wake")
        sent = time.monotonic()
        delivered(producer)
        # Well before the fetch's 10 s wait: the append woke the long poll.
        assert arrived.wait(8)
        assert time.monotonic() - sent < 8
        assert got == [b"wake"]
    finally:
        reader.join()
        consumer.close()


def test_a_fetch_across_nodes_answers_once_one_node_has_data(cluster):
    """Kafka's min_bytes is the request's: a fetch whose partitions live on three nodes
    answers as soon as one has records, not when the others' long polls end, and still
    names every partition with its high watermark."""
    cluster.admin.create_topic("across", 3, 1)
    leaders = {cluster.gateway.registry.route("across", p).leader for p in range(3)}
    assert len(leaders) == 3
    with Producer(cluster.address, linger_ms=0) as producer:
        producer.send("across", b"only here", partition=1).get(TIMEOUT_S)
    request = fetch_request(11, {"across": [0, 1, 2]}, max_wait_ms=10_000, min_bytes=1)
    with KafkaWire(cluster.kafka_address) as wire:
        started = time.monotonic()
        answer = wire.request(request, 11, FetchResponse)
        assert time.monotonic() - started < 5  # not the 10 s the empty partitions may wait
    partitions = {p.partition_index: p for p in answer.responses[0].partitions}
    assert sorted(partitions) == [0, 1, 2]
    assert [partitions[p].high_watermark for p in range(3)] == [0, 1, 0]
    assert read_header(partitions[1].records).record_count == 1


def test_a_waiting_fetch_across_nodes_answers_each_nodes_records_whole(cluster):
    """A waiting fetch with min_bytes 1 (the clients' default) across two leaders answers
    every record each node sent, not only the first piece read (the node's answer past its
    first 1 MiB chunk was read and thrown away, and asked for again by the next fetch)."""
    cluster.admin.create_topic("chunked", 2, 1)
    assert cluster.leader_of("chunked", 0) is not cluster.leader_of("chunked", 1)
    # Three 400 KB batches per partition: two 1 MiB chunks from each node.
    for partition in (0, 1):
        for i in range(3):
            batch = make_batch([bytes([i]) * 400_000])
            assert cluster.client.produce("chunked", {partition: batch})[0].error == 0
    request = fetch_request(
        12, {"chunked": [0, 1]}, max_wait_ms=5_000, min_bytes=1, max_bytes=10 << 20
    )
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, 12, FetchResponse)
    partitions = {p.partition_index: p for p in answer.responses[0].partitions}
    for partition in (0, 1):
        data = partitions[partition]
        assert (data.error_code, data.high_watermark) == (0, 3)
        assert len(data.records) > 1_200_000, (partition, len(data.records))


def test_one_produce_request_for_several_topics_answers_each(cluster):
    """librdkafka sends every topic led by the gateway in one request: each topic is written
    (concurrently), and one that does not exist is refused alone."""
    for name in ("multi-a", "multi-b", "multi-c"):
        cluster.admin.create_topic(name, 1, 3)
    producer = rdkafka_producer(cluster, **{"linger.ms": 200, "acks": "all"})
    outcome = {}
    for name in ("multi-a", "multi-b", "multi-c"):
        for i in range(5):
            producer.produce(
                name,
                value=b"%d" % i,
                on_delivery=lambda err, msg: outcome.setdefault(msg.topic(), []).append(err),
            )
    delivered(producer)
    assert outcome == {name: [None] * 5 for name in ("multi-a", "multi-b", "multi-c")}
    for name in ("multi-a", "multi-b", "multi-c"):
        assert [m.value() for m in rdkafka_consume(cluster, name, [0], 5)] == [
            b"%d" % i for i in range(5)
        ]
    with KafkaWire(cluster.kafka_address) as wire:
        request = ProduceRequest[9](
            transactional_id=None,
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=name,
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(
                            index=0, records=make_batch([b"wire"])
                        )
                    ],
                )
                for name in ("multi-a", "no-such-topic")
            ],
        )
        answer = wire.request(request, 9, ProduceResponse)
    results = {t.name: t.partition_responses[0] for t in answer.responses}
    assert (results["multi-a"].error_code, results["multi-a"].base_offset) == (0, 5)
    assert results["no-such-topic"].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_list_offsets_answers_earliest_latest_max_timestamp_and_by_time(cluster):
    cluster.admin.create_topic("listed", 1, 3)
    base_ms = 1_600_000_000_000
    stamps = [base_ms + 5000, base_ms + 9000, base_ms + 1000]  # the largest is offset 1
    with Producer(cluster.address, linger_ms=0) as producer:
        for stamp in stamps:
            producer.send("listed", b"x", timestamp_ms=stamp).get(TIMEOUT_S)

    def list_offset(timestamp):
        request = ListOffsetsRequest[6](
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name="listed",
                    partitions=[
                        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=timestamp
                        )
                    ],
                )
            ],
        )
        with KafkaWire(cluster.kafka_address) as wire:
            answer = wire.request(request, 6, ListOffsetsResponse).topics[0].partitions[0]
        assert answer.error_code == 0
        return answer.offset, answer.timestamp

    assert list_offset(-2)[0] == 0  # EARLIEST
    assert list_offset(-1)[0] == 3  # LATEST: the high watermark
    assert list_offset(-3) == (1, base_ms + 9000)  # MAX_TIMESTAMP
    assert list_offset(base_ms + 6000) == (1, base_ms + 9000)  # the first at or after it
    assert list_offset(base_ms + 60_000) == (-1, -1)  # none that late


def test_a_flood_of_pipelined_requests_keeps_order_and_each_records_offset(cluster):
    """librdkafka without idempotence keeps requests in flight without bound; those queued
    on the connection are written together (produce_coalescing.py): every delivery report's
    offset is where the record is read back, in send order per partition."""
    cluster.admin.create_topic("flood", 3, 3)
    # One record per batch: many small requests, which queue behind each other.
    producer = rdkafka_producer(cluster, **{"linger.ms": 0, "acks": "all", "batch.num.messages": 1})
    count = 3000
    reported = produce_round_robin(producer, "flood", 3, count)
    messages = rdkafka_consume(cluster, "flood", [0, 1, 2], count)
    assert_read_back_in_order(messages, reported, 3, count)


@pytest.mark.parametrize("version", [3, 5, 7, 8, 9])
def test_produce_answers_at_each_served_version(cluster, version):
    topic = f"produce-v{version}"
    cluster.admin.create_topic(topic, 1, 3)
    request = ProduceRequest[version](
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=0, records=make_batch([b"a", b"b"])
                    )
                ],
            )
        ],
    )
    with KafkaWire(cluster.kafka_address) as wire:
        for expected_base in (0, 2):
            answer = wire.request(request, version, ProduceResponse)
            result = answer.responses[0].partition_responses[0]
            assert (result.error_code, result.base_offset) == (0, expected_base)


@pytest.mark.parametrize("version", [4, 5, 7, 9, 11, 12, 13, 15, 16, 17])
def test_fetch_answers_at_each_served_version(cluster, version):
    topic = f"fetch-v{version}"
    cluster.admin.create_topic(topic, 1, 3)
    with Producer(cluster.address, linger_ms=0) as producer:
        producer.send(topic, b"record").get(TIMEOUT_S)
    request = fetch_request(version, {topic: [0]})
    topic_id = to_wire(cluster.gateway.registry.topic(topic).topic_id)
    if version >= 13:  # by id (KIP-516)
        request.topics[0].topic_id = topic_id
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, version, FetchResponse)
    if version >= 13:
        assert answer.responses[0].topic_id == topic_id
    data = answer.responses[0].partitions[0]
    assert (data.error_code, data.high_watermark) == (0, 1)
    assert read_header(data.records).record_count == 1
