"""The Kafka listener at the protocol level: what ApiVersions advertises, how Metadata
presents the cluster, and bad input (garbage, oversize frames, unknown api keys, versions out
of range) answered as Kafka's broker answers it, without disturbing other connections."""

from __future__ import annotations

import struct
import time

import confluent_kafka
import grpc
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest

from seglog.client.producer import Producer
from seglog.v1 import common_pb2, gateway_pb2_grpc
from services.gateway.kafka import error_codes
from services.gateway.kafka.apis import kafka_api_table
from services.gateway.kafka.brokers import broker_of_gateway, cluster_id
from services.gateway.kafka.listener import KafkaListener
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.waiting import wait_for, wait_until

# api key: (min, max) — the listener core's table (other areas add theirs).
CORE_APIS = {0: (3, 13), 1: (4, 17), 2: (1, 10), 3: (0, 12), 18: (0, 4), 22: (0, 5)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("kafka-listener"), nodes=3)
    c.admin.create_topic("described", 3, 2)
    yield c
    c.close()


def metadata(wire, topics, version=9):
    request = MetadataRequest[version](
        topics=None
        if topics is None
        else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    return wire.request(request, version, MetadataResponse)


def serves_metadata(cluster) -> bool:
    with KafkaWire(cluster.kafka_address) as wire:
        return any(t.name == "described" for t in metadata(wire, None).topics)


def test_api_versions_advertises_each_served_api_and_its_versions(cluster):
    with KafkaWire(cluster.kafka_address) as wire:
        for version in (0, 3):
            answer = wire.request(ApiVersionsRequest[version](), version, ApiVersionsResponse)
            assert answer.error_code == 0
            advertised = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
            for api_key, versions in CORE_APIS.items():
                assert advertised[api_key] == versions


def test_metadata_names_the_storage_leader_as_leader_with_the_real_epochs_and_replicas(cluster):
    port = cluster.gateway.kafka_listener.port
    with KafkaWire(cluster.kafka_address) as wire:
        for version in (1, 9, 12):
            answer = metadata(wire, ["described", "absent"], version)
            # Each node a broker at the listener's port + its id (kafka/brokers.py).
            assert [(b.node_id, f"{b.host}:{b.port}") for b in answer.brokers] == [
                (n, f"127.0.0.1:{port + n}") for n in sorted(cluster.nodes)
            ]
            assert answer.controller_id == min(cluster.nodes)
            if version >= 2:
                assert answer.cluster_id == cluster_id(cluster.gateway.kafka_core)
                assert len(answer.cluster_id) == 22  # Kafka's form: a base64 UUID
            described, absent = answer.topics
            assert absent.error_code == error_codes.UNKNOWN_TOPIC_OR_PARTITION
            assert described.error_code == 0 and not described.is_internal
            topic = cluster.gateway.registry.topic("described")
            assert len(described.partitions) == 3
            for p in described.partitions:
                assignment = topic.partitions[p.partition_index]
                assert (p.error_code, p.leader_id) == (0, assignment.leader)
                assert p.replica_nodes == assignment.replicas and p.isr_nodes == assignment.isr
                if version >= 7:
                    assert p.leader_epoch == assignment.leader_epoch
        # v0: an empty list is every topic; v1+: an empty list is none.
        assert "described" in {t.name for t in metadata(wire, [], 0).topics}
        assert metadata(wire, [], 1).topics == []
    assert "absent" not in cluster.gateway.registry.topics  # never created by Metadata


def test_api_versions_past_the_served_range_answers_v0_with_the_table(cluster):
    with KafkaWire(cluster.kafka_address) as wire:
        # v3's encoding, announced as v7: the listener reads only the header.
        request = ApiVersionsRequest[3](client_software_name="x", client_software_version="1")
        request.with_header(correlation_id=1, client_id="future")
        wire.correlation_id = 1
        frame = bytearray(request.encode(header=True, framed=True))
        struct.pack_into(">h", frame, 6, 7)
        wire.send_raw(bytes(frame))
        answer = wire.decode(wire.read_frame(), 0, ApiVersionsResponse)
        assert answer.error_code == error_codes.UNSUPPORTED_VERSION
        assert {k.api_key for k in answer.api_keys} >= set(CORE_APIS)
        # The connection goes on.
        assert wire.request(ApiVersionsRequest[0](), 0, ApiVersionsResponse).error_code == 0


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


BAD_INPUT = {
    "garbage": _frame(b"\x13\x37" * 20),
    "unknown api key": _frame(struct.pack(">hhih", 9999, 0, 1, -1)),
    "negative size": struct.pack(">i", -5),
    "size past socket.request.max.bytes": struct.pack(">i", 200 * 1024 * 1024),
    "truncated header": _frame(struct.pack(">hh", 3, 9) + b"\x00"),
    "truncated body": _frame(struct.pack(">hhih", 3, 1, 1, -1) + b"\x00\x00\x00\x05\x00"),
}


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_closes_its_connection_and_the_listener_serves_on(cluster, name):
    with KafkaWire(cluster.kafka_address) as bystander:
        with KafkaWire(cluster.kafka_address) as wire:
            wire.send_raw(BAD_INPUT[name])
            assert wire.closed_by_listener()
        assert metadata(bystander, ["described"]).topics[0].error_code == 0
    assert serves_metadata(cluster)


def test_a_version_outside_the_advertised_range_closes_the_connection(cluster):
    with KafkaWire(cluster.kafka_address) as wire:
        request = ProduceRequest[2](
            acks=1,
            timeout_ms=1000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name="described",
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"")
                    ],
                )
            ],
        )
        wire.send_raw(wire.encode(request, 2))
        assert wire.closed_by_listener()
    assert serves_metadata(cluster)


def test_a_connection_stalled_mid_frame_does_not_hold_up_others(cluster):
    with KafkaWire(cluster.kafka_address) as stalled:
        stalled.send_raw(struct.pack(">i", 100) + b"\x00\x03")
        assert serves_metadata(cluster)


def test_an_offline_partition_answers_leader_not_available(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=2)
    try:
        cluster.admin.create_topic("single", 2, 1)
        topic = cluster.gateway.registry.topic("single")
        victim = topic.partitions[0].leader
        cluster.stop_node(victim, controlled=False)

        def partitions():
            with KafkaWire(cluster.kafka_address) as wire:
                return {
                    p.partition_index: p for p in metadata(wire, ["single"]).topics[0].partitions
                }

        wait_for(
            lambda: partitions()[0].error_code == error_codes.LEADER_NOT_AVAILABLE,
            15,
            "the stopped node's partition to be reported offline",
        )
        offline, online = partitions()[0], partitions()[1]
        assert offline.leader_id == -1
        assert offline.offline_replicas == [victim]
        assert online.error_code == 0 and online.leader_id != victim
    finally:
        cluster.close()


@pytest.fixture
def small_listener(cluster):
    """A second Kafka listener on the cluster's gateway: two connections at most, closed
    after half a second idle."""
    listener = KafkaListener(
        "127.0.0.1:0",
        kafka_api_table(),
        cluster.gateway.kafka_core,
        max_request_bytes=cluster.gateway.config.max_request_bytes,
        max_connections=2,
        connections_max_idle_ms=500,
    )
    listener.start()
    yield listener
    listener.stop()


def api_versions_answered(wire) -> bool:
    return wire.request(ApiVersionsRequest[0](), 0, ApiVersionsResponse).error_code == 0


def test_connections_past_max_connections_are_closed_at_once(small_listener):
    first, second = KafkaWire(small_listener.address), KafkaWire(small_listener.address)
    try:
        assert api_versions_answered(first) and api_versions_answered(second)
        with KafkaWire(small_listener.address) as third:
            assert third.closed_by_listener()
        first.close()
        assert wait_until(lambda: small_listener.open_connections == 1)
        with KafkaWire(small_listener.address) as fourth:
            assert api_versions_answered(fourth)
    finally:
        first.close()
        second.close()


def test_an_idle_connection_is_closed(small_listener):
    with KafkaWire(small_listener.address) as wire:
        assert api_versions_answered(wire)
        started = time.monotonic()
        assert wire.closed_by_listener()  # the wire's own timeout is 15 s
        assert time.monotonic() - started < 10
    assert wait_until(lambda: small_listener.open_connections == 0)


def test_stopping_the_listener_ends_its_connections(cluster, small_listener):
    with KafkaWire(small_listener.address) as wire:
        assert api_versions_answered(wire)
        small_listener.stop()
        assert wire.closed_by_listener()
    assert small_listener.open_connections == 0


def test_a_sole_gateway_is_the_broker_of_any_gateway_address_it_is_asked_about(cluster):
    """Its lowest live node's broker, at that node's lane (an id Metadata lists)."""
    gateway = cluster.gateway
    mine = broker_of_gateway(gateway.kafka_core, gateway.advertised_address)
    assert mine is not None
    lowest = min(cluster.nodes)
    assert (mine.node_id, mine.address) == (lowest, gateway.kafka_listener.lane_addresses[lowest])


def test_sasl_on_a_plaintext_listener_is_an_illegal_state(cluster):
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, SaslHandshakeResponse)
        assert answer.error_code == 34  # ILLEGAL_SASL_STATE
        assert serves_metadata(cluster)


BIG_RECORD_BYTES = 900_000
FETCH_MAX_BYTES = 1_000_000


@pytest.fixture(scope="module")
def big_batches(cluster):
    """Two partitions led by two nodes, each holding two batches of ~900 KB (one record
    each): any two of them are past a 1,000,000-byte fetch."""
    cluster.admin.create_topic("big-batches", 2, 1)
    leaders = {cluster.gateway.registry.route("big-batches", p).leader for p in (0, 1)}
    assert len(leaders) == 2, leaders
    with Producer(cluster.address, linger_ms=0, max_request_size=2_000_000) as producer:
        for i in range(4):
            value = bytes([i]) * BIG_RECORD_BYTES
            producer.send("big-batches", value, partition=i % 2).get(timeout=30)
    return "big-batches"


@pytest.mark.parametrize("max_wait_ms", [0, 500])
def test_a_fetch_over_two_leaders_answers_within_max_bytes_but_the_first_batch(
    cluster, big_batches, max_wait_ms
):
    """Kafka's rule: no batch past the request's max_bytes but the answer's first (each node
    given the whole budget, this answered 1,843,824 bytes), nor past a partition's
    partition_max_bytes but the first. A fetch that may wait ends once a node's answer is
    complete and asks the partitions not answered yet again: that second read gets only what
    the first left."""
    partitions = [
        FetchRequest[12].FetchTopic.FetchPartition(
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=0,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1_048_576,
        )
        for p in (0, 1)
    ]
    request = FetchRequest[12](
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=FETCH_MAX_BYTES,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest[12].FetchTopic(topic=big_batches, partitions=partitions)],
        forgotten_topics_data=[],
        rack_id="",
    )
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, 12, FetchResponse)
    answered = {p.partition_index: p for p in answer.responses[0].partitions}
    assert [answered[p].error_code for p in (0, 1)] == [0, 0]
    sizes = [len(answered[p].records or b"") for p in (0, 1)]
    # One ~900 KB batch in all: a second one, from either partition, is past the limit.
    assert sorted(sizes)[0] == 0 and BIG_RECORD_BYTES < sum(sizes) < 2 * BIG_RECORD_BYTES, sizes
    # The partition left out still says where its log ends, as a Kafka broker answers it.
    assert [answered[p].high_watermark for p in (0, 1)] == [2, 2]


def test_a_grpc_fetch_over_two_leaders_answers_within_max_bytes_but_the_first_batch(
    cluster, big_batches
):
    """The same rule on the gRPC API, which shares the core's fetch: each node given half the
    budget still sends its first ~900 KB batch, so this answered ~1.8 MB before the core cut
    the answer; a partition left out still says where its log ends."""
    request = common_pb2.FetchRequest(max_bytes=FETCH_MAX_BYTES, max_wait_ms=0, min_bytes=1)
    for p in (0, 1):
        request.partitions.add(
            topic=big_batches, partition=p, fetch_offset=0, partition_max_bytes=1_048_576
        )
    with grpc.insecure_channel(cluster.address) as channel:
        messages = list(gateway_pb2_grpc.GatewayStub(channel).Fetch(request, timeout=30))
    sizes = {0: 0, 1: 0}
    watermarks = {}
    for message in messages:
        assert message.error == common_pb2.NONE, message.error_message
        sizes[message.partition] += len(message.records)
        watermarks[message.partition] = message.high_watermark
    assert sorted(sizes.values())[0] == 0, sizes
    assert BIG_RECORD_BYTES < sum(sizes.values()) < 2 * BIG_RECORD_BYTES, sizes
    assert watermarks == {0: 2, 1: 2}


def test_librdkafka_reads_batches_of_two_leaders_through_a_1_mb_fetch_limit(cluster, big_batches):
    """librdkafka sizes its receive buffer from fetch.max.bytes and drops a connection whose
    answer is larger ("Invalid response size"): over two leaders' ~900 KB batches it made no
    progress at all before the answer kept to the limit."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_address,
            "group.id": "big-batch-reader",
            "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_MAX_BYTES,
            "receive.message.max.bytes": FETCH_MAX_BYTES + 512,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(big_batches, p, 0) for p in (0, 1)])
        read: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while len(read) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read.append((message.partition(), message.offset()))
        assert sorted(read) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    finally:
        consumer.close()
