"""Produce over the Kafka wire at every version served (3–13), with kafka-python's codec on a
socket: v13 names topics by id (KIP-516), a transactional produce outside its transaction is
refused with the codes Kafka's broker answers, and a partition answered
NOT_LEADER_OR_FOLLOWER carries its current leader and that leader's endpoint from v10 on
(KIP-951), as Kafka's broker fills them."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.records import RecordBatchBuilder, iter_records
from services.gateway.kafka import error_codes
from services.gateway.kafka.brokers import broker_view
from services.gateway.kafka.topic_ids import to_wire
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire, metadata
from tests.waiting import wait_until

NOT_LEADER_OR_FOLLOWER = 6
VERSIONS = range(3, 14)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("produce-versions"), nodes=2)
    yield c
    c.close()


def produce_request(version, topic, records, *, transactional_id=None, acks=-1, timeout_ms=5000):
    named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"name": topic}
    return ProduceRequest[version](
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            ProduceRequest.TopicProduceData(
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
                ],
                **named,
            )
        ],
    )


def test_api_versions_advertises_produce_up_to_13(cluster):
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(ApiVersionsRequest[3](), 3, ApiVersionsResponse)
    produce = next(k for k in answer.api_keys if k.api_key == ProduceRequest.API_KEY)
    assert (produce.min_version, produce.max_version) == (3, 13)


def test_every_version_writes_and_v13_names_the_topic_by_id(cluster):
    cluster.admin.create_topic("every-version", 1, 2)
    topic_id = to_wire(cluster.gateway.registry.topic_id_of("every-version"))
    with KafkaWire(cluster.kafka_address) as wire:
        for offset, version in enumerate(VERSIONS):
            topic = topic_id if version >= 13 else "every-version"
            request = produce_request(version, topic, make_batch([b"v%d" % version]))
            answer = wire.request(request, version, ProduceResponse)
            (topic_answer,) = answer.responses
            if version >= 13:
                assert topic_answer.topic_id == topic_id
            else:
                assert topic_answer.name == "every-version"
            (result,) = topic_answer.partition_responses
            assert (result.error_code, result.base_offset) == (0, offset), version
            if version >= 10:
                assert result.current_leader is None  # only with NOT_LEADER_OR_FOLLOWER
                assert answer.node_endpoints == []
    values = [
        r.value for r in iter_records(bytes(cluster.log("every-version", 0).read(0, 1 << 20)))
    ]
    assert values == [b"v%d" % v for v in VERSIONS]


def test_pipelined_v13_requests_each_get_their_own_offsets(cluster):
    """Requests queued on one connection may be written as one append per partition
    (produce_coalescing.py), which reads topic names: v13's ids are resolved first."""
    cluster.admin.create_topic("pipelined-by-id", 1, 2)
    topic_id = to_wire(cluster.gateway.registry.topic_id_of("pipelined-by-id"))
    with KafkaWire(cluster.kafka_address) as wire:
        frames = b"".join(
            wire.encode(produce_request(13, topic_id, make_batch([b"%d" % i, b"%d" % i])), 13)
            for i in range(4)
        )
        wire.send_raw(frames)
        answers = [
            ProduceResponse.decode(wire.read_frame(), version=13, header=True) for _ in range(4)
        ]
    results = [a.responses[0].partition_responses[0] for a in answers]
    assert [a.responses[0].topic_id for a in answers] == [topic_id] * 4
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 0), (0, 2), (0, 4), (0, 6)]
    values = [
        r.value for r in iter_records(bytes(cluster.log("pipelined-by-id", 0).read(0, 1 << 20)))
    ]
    assert values == [b"%d" % (i // 2) for i in range(8)]


def test_v13_with_an_id_no_topic_has_answers_unknown_topic_id(cluster):
    cluster.admin.create_topic("known-by-id", 1, 2)
    known = to_wire(cluster.gateway.registry.topic_id_of("known-by-id"))
    request = ProduceRequest[13](
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                topic_id=topic_id,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=0, records=make_batch([b"x"])
                    )
                ],
            )
            for topic_id in (uuid.uuid4(), uuid.UUID(int=0), known)
        ],
    )
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, 13, ProduceResponse)
    codes = [(t.topic_id, t.partition_responses[0].error_code) for t in answer.responses]
    assert codes == [
        (request.topic_data[0].topic_id, error_codes.UNKNOWN_TOPIC_ID),
        (None, error_codes.UNKNOWN_TOPIC_ID),  # the codec reads the zero id as None
        (known, 0),  # the other topics of the request are written
    ]
    assert cluster.log("known-by-id", 0).log_end_offset == 1


@pytest.mark.parametrize("version", [3, 9, 12, 13])
def test_a_transactional_batch_outside_a_transaction_is_refused_and_not_written(cluster, version):
    """Without a transactional id the whole request is TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    (Kafka's KafkaApis.handleProduceRequest); with one the coordinator never gave this
    producer id, the partition is not in any transaction of it: INVALID_TXN_STATE (KIP-890's
    verification). Nothing is written either way."""
    topic_name = f"no-transactions-{version}"
    cluster.admin.create_topic(topic_name, 1, 2)
    topic = (
        to_wire(cluster.gateway.registry.topic_id_of(topic_name)) if version >= 13 else topic_name
    )
    builder = RecordBatchBuilder(producer_id=7, producer_epoch=0, is_transactional=True)
    builder.append(None, b"in a transaction", 1, None)
    transactional = builder.build()
    with KafkaWire(cluster.kafka_address) as wire:
        for transactional_id, code in (
            (None, error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            ("never-began", 48),  # INVALID_TXN_STATE
        ):
            request = produce_request(
                version, topic, transactional, transactional_id=transactional_id
            )
            answer = wire.request(request, version, ProduceResponse)
            (result,) = answer.responses[0].partition_responses
            assert result.error_code == code
            assert result.base_offset == -1
    assert cluster.log(topic_name, 0).log_end_offset == 0  # nothing written


def test_not_leader_or_follower_names_the_current_leader_and_its_endpoint(tmp_path):
    """The leader's node is down (stopped without a controlled shutdown) and its session has
    not lapsed (a long session timeout keeps it so): the registry still names it leader, as
    Kafka's metadata cache would until the controller fences it. From v10 on the answer names
    it as Metadata does (the node's broker id and the epoch) and its endpoint (its lane);
    v9 has neither field."""
    cluster = LocalCluster(tmp_path, nodes=2, session_timeout_ms=60_000)
    try:
        cluster.admin.create_topic("orphaned", 1, 1)
        victim = cluster.gateway.registry.route("orphaned", 0).leader
        epoch = cluster.gateway.registry.topic("orphaned").partitions[0].leader_epoch
        topic_id = to_wire(cluster.gateway.registry.topic_id_of("orphaned"))
        # Each node's broker port is bound as it registers (node_lanes.py): wait for it.
        assert wait_until(
            lambda: any(
                b.node_id == victim for b in broker_view(cluster.gateway.kafka_core).brokers
            )
        )
        view = broker_view(cluster.gateway.kafka_core)
        (lane,) = [b for b in view.brokers if b.node_id == victim]
        cluster.stop_node(victim, controlled=False)
        with KafkaWire(cluster.kafka_address) as wire:
            for version in (9, 10, 11, 12, 13):
                topic = topic_id if version >= 13 else "orphaned"
                request = produce_request(version, topic, make_batch([b"x"]), timeout_ms=2000)
                answer = wire.request(request, version, ProduceResponse)
                (result,) = answer.responses[0].partition_responses
                assert result.error_code == NOT_LEADER_OR_FOLLOWER, version
                if version < 10:
                    assert "node_endpoints" not in answer.to_dict()  # not in v9's schema
                    continue
                leader = result.current_leader
                assert (leader.leader_id, leader.leader_epoch) == (victim, epoch)
                assert [(e.node_id, e.host, e.port, e.rack) for e in answer.node_endpoints] == [
                    (victim, lane.host, lane.port, None)
                ]
    finally:
        cluster.close()


def test_a_partition_without_a_leader_is_hinted_as_leaderless(tmp_path):
    """Once the dead node's session lapses, Metadata names no leader for its partition
    (LEADER_NOT_AVAILABLE, leader -1: no other replica to elect): the hint is the same,
    leader -1 at the partition's epoch with no endpoint, as Kafka's broker fills it from a
    metadata cache without a leader."""
    cluster = LocalCluster(tmp_path, nodes=2)
    try:
        cluster.admin.create_topic("leaderless", 1, 1)
        victim = cluster.gateway.registry.route("leaderless", 0).leader
        cluster.stop_node(victim, controlled=False)
        assert wait_until(
            lambda: (
                metadata(cluster.kafka_address, "leaderless").topics[0].partitions[0].leader_id
                == -1
            )
        )
        with KafkaWire(cluster.kafka_address) as wire:
            request = produce_request(10, "leaderless", make_batch([b"x"]), timeout_ms=2000)
            answer = wire.request(request, 10, ProduceResponse)
        (result,) = answer.responses[0].partition_responses
        assignment = cluster.gateway.registry.topic("leaderless").partitions[0]
        assert result.error_code == NOT_LEADER_OR_FOLLOWER
        leader = result.current_leader
        assert (leader.leader_id, leader.leader_epoch) == (-1, assignment.leader_epoch)
        assert answer.node_endpoints == []  # a leader Metadata does not list has no endpoint
    finally:
        cluster.close()
