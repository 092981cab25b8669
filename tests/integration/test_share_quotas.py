"""Client quotas on share fetches (issue 55), against a real gateway and node: a share group
member whose client id has a consumer_byte_rate is charged for the records its ShareFetch
answers carry, as a Fetch's are (Kafka's fetch quota meters ShareFetch too). On Kafka's
protocol the answers say throttle_time_ms once past the quota and the connection is muted
after them (KIP-219); on seglog's gRPC ShareGroups service the answers are held back. Either
way the rate read stays within the quota."""

from __future__ import annotations

import time

import grpc
import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from seglog.rpc.client_id import CLIENT_ID_METADATA
from seglog.v1 import (
    common_pb2,
    gateway_pb2_grpc,
    share_groups_pb2,
    share_groups_pb2_grpc,
    share_pb2,
)
from services.gateway.kafka.share_messages import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from services.gateway.kafka.topic_ids import to_wire
from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire

TOPIC = "metered-queue"
RATE_BYTES_PER_S = 40_000
RECORDS_PER_BATCH = 10
BATCH = make_batch([b"x" * 1000] * RECORDS_PER_BATCH, timestamp_ms=1_700_000_000_000)  # ~10 KB
BATCHES = 40  # ~400 KB: more than either reader gets through in its window
# The first second of reads rides on a full bucket (one second of the rate); the rate is
# measured over the seconds after it.
BURST_S = 1.0
MEASURE_S = 4.0
ACCEPT = 1
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("share-quotas"), nodes=1)
    c.admin.create_topic(TOPIC, 1, 1)
    channel = grpc.insecure_channel(c.address)
    producer = gateway_pb2_grpc.GatewayStub(channel)
    for _ in range(BATCHES):
        request = common_pb2.ProduceRequest(topic=TOPIC, acks=1, timeout_ms=10_000)
        request.partitions.add(partition=0, records=BATCH)
        assert producer.Produce(request, timeout=30).partitions[0].error == 0
    channel.close()
    yield c
    c.close()


def _read_from_earliest(cluster, group: str, client_id: str) -> None:
    """The group starts at the log's start, and `client_id` may read RATE_BYTES_PER_S."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_address)
    try:
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.GROUP, group, {"share.auto.offset.reset": "earliest"}
                )
            ],
            raise_on_unknown=False,
        )
    finally:
        admin.close()
    cluster.admin.alter_client_quotas(
        {"client-id": client_id}, {"consumer_byte_rate": RATE_BYTES_PER_S}
    )


def _acquired(ranges) -> list[tuple[int, int]]:
    return [(r.first_offset, r.last_offset) for r in ranges]


class KafkaMember:
    """A share group member on Kafka's protocol, as Kafka's share consumer speaks it."""

    def __init__(self, cluster, group: str, client_id: str) -> None:
        self.wire = KafkaWire(cluster.kafka_address, client_id=client_id)
        self.group = group
        self.topic_id = to_wire(cluster.gateway.registry.image.topic_id_of(TOPIC))
        self.session_epoch = 0
        request = ShareGroupHeartbeatRequest[1](
            group_id=group,
            member_id="kafka-member",
            member_epoch=0,
            rack_id=None,
            subscribed_topic_names=[TOPIC],
        )
        answer = self.wire.request(request, 1, ShareGroupHeartbeatResponse)
        assert answer.error_code == 0, answer

    def fetch(self, acks: list[tuple[int, int]]) -> tuple[int, list[tuple[int, int]], int]:
        """(records' bytes, acquired ranges, throttle_time_ms) of a fetch acknowledging `acks`."""
        request_class = ShareFetchRequest[1]
        partition_class = request_class.FetchTopic.FetchPartition
        partition = partition_class(
            partition_index=0,
            acknowledgement_batches=[
                partition_class.AcknowledgementBatch(
                    first_offset=first, last_offset=last, acknowledge_types=[ACCEPT]
                )
                for first, last in acks
            ],
        )
        request = request_class(
            group_id=self.group,
            member_id="kafka-member",
            share_session_epoch=self.session_epoch,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=RECORDS_PER_BATCH,
            batch_size=RECORDS_PER_BATCH,
            topics=[request_class.FetchTopic(topic_id=self.topic_id, partitions=[partition])],
            forgotten_topics_data=[],
        )
        answer = self.wire.request(request, 1, ShareFetchResponse)
        assert answer.error_code == 0, answer
        self.session_epoch += 1
        parts = [p for t in answer.responses for p in t.partitions]
        assert all(p.error_code == 0 for p in parts), parts
        size = sum(len(p.records or b"") for p in parts)
        return (
            size,
            [r for p in parts for r in _acquired(p.acquired_records)],
            answer.throttle_time_ms,
        )


class GrpcMember:
    """A share group member on seglog's gRPC ShareGroups service, naming its client id."""

    def __init__(self, cluster, group: str, client_id: str) -> None:
        self.channel = grpc.insecure_channel(cluster.address)
        self.stub = share_groups_pb2_grpc.ShareGroupsStub(self.channel)
        self.metadata = ((CLIENT_ID_METADATA, client_id),)
        self.group = group
        self.session_epoch = 0
        answer = self.stub.ShareGroupHeartbeat(
            share_groups_pb2.ShareHeartbeatRequest(
                group_id=group, member_id="grpc-member", member_epoch=0, subscribed_topics=[TOPIC]
            ),
            metadata=self.metadata,
            timeout=30,
        )
        assert answer.error == 0, answer

    def fetch(self, acks: list[tuple[int, int]]) -> tuple[int, list[tuple[int, int]], int]:
        call = share_groups_pb2.ShareFetchCall(
            group_id=self.group,
            member_id="grpc-member",
            session_epoch=self.session_epoch,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=RECORDS_PER_BATCH,
        )
        call.partitions.add(
            topic=TOPIC,
            partition=0,
            acks=[
                share_pb2.ShareAckBatch(first_offset=f, last_offset=last, types=[ACCEPT])
                for f, last in acks
            ],
        )
        answer = self.stub.ShareFetch(call, metadata=self.metadata, timeout=30)
        assert answer.error == 0, answer
        self.session_epoch += 1
        assert all(p.error == 0 for p in answer.partitions), answer.partitions
        size = sum(len(p.records) for p in answer.partitions)
        # The gRPC answer has no throttle field: it was held back instead.
        return size, [r for p in answer.partitions for r in _acquired(p.acquired)], 0


def _read_for(member, seconds: float) -> tuple[float, int, int]:
    """Records' bytes/s read past the burst over `seconds` of back-to-back share fetches (each
    acknowledging what the last acquired), the answers saying a throttle, and all bytes read."""
    received = total = throttled = 0
    acks: list[tuple[int, int]] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        size, acks, throttle_ms = member.fetch(acks)
        total += size
        if time.monotonic() - start > BURST_S:
            received += size
        throttled += throttle_ms > 0
    return received / (time.monotonic() - start - BURST_S), throttled, total


def test_a_share_consumer_on_kafkas_protocol_is_held_to_its_consumer_byte_rate(cluster):
    _read_from_earliest(cluster, "kafka-share", "share-kafka")
    member = KafkaMember(cluster, "kafka-share", "share-kafka")
    try:
        rate, throttled, total = _read_for(member, BURST_S + MEASURE_S)
    finally:
        member.wire.close()
    # Unthrottled, a loopback read of the ~400 KB takes well under the window: the quota is
    # what held it to the rate.
    assert total < BATCHES * len(BATCH), total
    assert 0.6 * RATE_BYTES_PER_S <= rate <= 1.4 * RATE_BYTES_PER_S, rate
    assert throttled > 0


def test_a_share_consumer_on_grpc_is_held_to_its_consumer_byte_rate(cluster):
    _read_from_earliest(cluster, "grpc-share", "share-grpc")
    quotas = cluster.gateway.service.quotas
    held_before_ms = quotas.throttled_ms
    member = GrpcMember(cluster, "grpc-share", "share-grpc")
    try:
        rate, _, total = _read_for(member, BURST_S + MEASURE_S)
    finally:
        member.channel.close()
    assert total < BATCHES * len(BATCH), total
    assert 0.6 * RATE_BYTES_PER_S <= rate <= 1.4 * RATE_BYTES_PER_S, rate
    assert quotas.throttled_ms > held_before_ms
