"""Kafka requests validated whole before anything is written, each answered as Kafka's broker
answers it: the cases found from outside (a records length past the frame's end, an empty and
a null topic array, a null group id), one batch split across queued produce requests,
and empty ids answered as Kafka answers them. Black-box: frames on a socket, answers read
back, the partition's log end offset, the cluster's log."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

from tests.batches import make_batch
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire

TOPIC = "validated"
CORRUPT_MESSAGE = 2
BATCH = make_batch([b"one"], timestamp_ms=1_700_000_000_000)
_INT32 = struct.Struct(">i")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("kafka-validation"), nodes=2)
    try:
        c.admin.create_topic(TOPIC, 1, 2)
        yield c
    finally:
        c.close()


def end_offset(cluster: LocalCluster) -> int:
    return int(cluster.log(TOPIC, 0).log_end_offset)


def produce(records: bytes | None, version: int, *, topics: object = ..., acks: int = -1):
    data = ProduceRequest.TopicProduceData
    topic_data = (
        [data(name=TOPIC, partition_data=[data.PartitionProduceData(index=0, records=records)])]
        if topics is ...
        else topics
    )
    return ProduceRequest[version](
        transactional_id=None, acks=acks, timeout_ms=5000, topic_data=topic_data
    )


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing the cluster logged carries a traceback, nor is the one line a handler's
    unexpected exception is logged as (an exception nobody expected)."""
    raised = [r for r in caplog.records if r.exc_info or r.name.endswith("handler_guard")]
    assert not raised, [f"{r.name}: {r.getMessage()}: {r.exc_info}" for r in raised]


def still_served(cluster: LocalCluster) -> None:
    with KafkaWire(cluster.kafka_address) as wire:
        wire.request(ApiVersionsRequest[3](), 3, ApiVersionsResponse)


@pytest.mark.parametrize("version", [7, 9], ids=["int32 length", "flexible: varint length"])
def test_a_records_length_past_the_frames_end_closes_the_connection_and_writes_nothing(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    """The records field says 2^31-1 bytes (flexible: the varint of 2^31), the frame ends after
    one batch: Kafka's reader fails on it (the connection is closed); nothing is written."""
    before = end_offset(cluster)
    with KafkaWire(cluster.kafka_address) as wire:
        frame = bytearray(wire.encode(produce(BATCH, version), version))
        at = frame.rindex(BATCH)
        if version < 9:
            assert _INT32.unpack_from(frame, at - 4)[0] == len(BATCH)
            _INT32.pack_into(frame, at - 4, 2**31 - 1)
        else:
            # The compact length (len + 1) is one varint byte for this batch: made a 5-byte
            # varint of 2^31 by taking 4 bytes of the batch's offset into it.
            assert frame[at - 1] == len(BATCH) + 1 and BATCH[:4] == b"\x00" * 4
            frame[at - 1 : at + 4] = b"\x80\x80\x80\x80\x08"
            _INT32.pack_into(frame, 0, len(frame) - 4)
        wire.send_raw(bytes(frame))
        assert wire.closed_by_listener()
    assert end_offset(cluster) == before
    no_tracebacks(caplog)
    still_served(cluster)


def test_a_batch_length_past_the_record_set_is_a_corrupt_message(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch's own batchLength says 2^31-1: CORRUPT_MESSAGE for its partition, as Kafka
    answers a record set that is not whole batches; nothing written."""
    batch = bytearray(BATCH)
    _INT32.pack_into(batch, 8, 2**31 - 1)
    before = end_offset(cluster)
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(produce(bytes(batch), 7), 7, ProduceResponse)
    [partition] = answer.responses[0].partition_responses
    assert partition.error_code == CORRUPT_MESSAGE
    assert end_offset(cluster) == before
    no_tracebacks(caplog)


@pytest.mark.parametrize("version", [3, 9])
def test_an_empty_topic_array_gets_an_empty_answer(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(produce(None, version, topics=[]), version, ProduceResponse)
        assert answer.responses == []
        # acks=0: no answer at all; the connection goes on (the next request is answered).
        wire.send_raw(wire.encode(produce(None, version, topics=[], acks=0), version))
        wire.request(ApiVersionsRequest[3](), 3, ApiVersionsResponse)
    no_tracebacks(caplog)


@pytest.mark.parametrize("version", [3, 9])
def test_a_null_topic_array_closes_the_connection_without_a_traceback(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    """TopicData is not nullable: Kafka's reader refuses the request (INVALID_REQUEST), and
    the broker closes the connection."""
    with KafkaWire(cluster.kafka_address) as wire:
        wire.send_raw(wire.encode(produce(None, version, topics=None), version))
        assert wire.closed_by_listener()
    no_tracebacks(caplog)
    still_served(cluster)


NULL_GROUP_ID = {
    "JoinGroup": (
        JoinGroupRequest[5](
            group_id=None,
            session_timeout_ms=6000,
            rebalance_timeout_ms=6000,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[],
        ),
        5,
    ),
    "OffsetCommit": (
        OffsetCommitRequest[8](
            group_id=None,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[],
        ),
        8,
    ),
    "OffsetFetch": (
        OffsetFetchRequest[7](group_id=None, topics=None, require_stable=False),
        7,
    ),
}


@pytest.mark.parametrize("api", sorted(NULL_GROUP_ID))
def test_a_null_group_id_closes_the_connection_without_a_traceback(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture, api: str
) -> None:
    request, version = NULL_GROUP_ID[api]
    with KafkaWire(cluster.kafka_address) as wire:
        wire.send_raw(wire.encode(request, version))
        assert wire.closed_by_listener()
    no_tracebacks(caplog)
    still_served(cluster)


def test_two_halves_of_one_batch_in_two_queued_requests_are_both_refused(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Two produce requests sent back to back, each holding one half of a valid batch: each
    is refused alone (CORRUPT_MESSAGE), though put end to end their record sets would be
    that batch; nothing is written."""
    cut = len(BATCH) // 2
    before = end_offset(cluster)
    with KafkaWire(cluster.kafka_address) as wire:
        first = wire.encode(produce(BATCH[:cut], 7), 7)
        second = wire.encode(produce(BATCH[cut:], 7), 7)
        wire.send_raw(first + second)  # one write: queued together at the listener
        answers = []
        for correlation_id in (wire.correlation_id - 1, wire.correlation_id):
            frame = wire.read_frame()
            assert frame is not None
            assert _INT32.unpack_from(frame)[0] == correlation_id
            answers.append(ProduceResponse.decode(frame, version=7, header=True))
    for answer in answers:
        [partition] = answer.responses[0].partition_responses
        assert partition.error_code == CORRUPT_MESSAGE
    assert end_offset(cluster) == before
    no_tracebacks(caplog)


INVALID_GROUP_ID = 24
INVALID_REQUEST = 42
EMPTY_GROUP_ID = {
    "Heartbeat": (
        HeartbeatRequest[4](group_id="", generation_id=1, member_id="m", group_instance_id=None),
        4,
        HeartbeatResponse,
    ),
    "SyncGroup": (
        SyncGroupRequest[5](
            group_id="",
            generation_id=1,
            member_id="m",
            group_instance_id=None,
            protocol_type=None,
            protocol_name=None,
            assignments=[],
        ),
        5,
        SyncGroupResponse,
    ),
    "LeaveGroup": (LeaveGroupRequest[4](group_id="", members=[]), 4, LeaveGroupResponse),
    "OffsetDelete": (OffsetDeleteRequest[0](group_id="", topics=[]), 0, OffsetDeleteResponse),
}


@pytest.mark.parametrize("api", sorted(EMPTY_GROUP_ID))
def test_an_empty_group_id_is_an_invalid_group_id(cluster: LocalCluster, api: str) -> None:
    """As Kafka's group coordinator answers it (only OffsetCommit and OffsetFetch take an
    empty group id, for old clients)."""
    request, version, response_class = EMPTY_GROUP_ID[api]
    with KafkaWire(cluster.kafka_address) as wire:
        answer = wire.request(request, version, response_class)
    assert answer.error_code == INVALID_GROUP_ID


def test_an_empty_transactional_id_is_an_invalid_request(cluster: LocalCluster) -> None:
    """Kafka's transaction coordinator: null is an idempotent producer, "" a bad request."""

    def init(transactional_id: str | None) -> Any:
        request = InitProducerIdRequest[4](
            transactional_id=transactional_id,
            transaction_timeout_ms=60000,
            producer_id=-1,
            producer_epoch=-1,
        )
        with KafkaWire(cluster.kafka_address) as wire:
            return wire.request(request, 4, InitProducerIdResponse)

    empty = init("")
    assert (empty.error_code, empty.producer_id) == (INVALID_REQUEST, -1)
    idempotent = init(None)
    assert (idempotent.error_code, idempotent.producer_epoch) == (0, 0)
    assert idempotent.producer_id >= 0


@pytest.fixture(autouse=True)
def _cluster_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
