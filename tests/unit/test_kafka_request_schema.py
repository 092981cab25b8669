"""A Kafka request body read as Kafka's reader reads it (services/gateway/kafka/
request_schema.py), and record sets checked for whole entries before a relay puts two of them
end to end (seglog.records.checks.frames_whole_entries)."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer import JoinGroupRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from seglog.records.checks import frames_whole_entries
from services.gateway.kafka.request_schema import MalformedRequest, decode_request
from tests.batches import make_batch

BATCH = make_batch([b"a", b"b"], timestamp_ms=1_700_000_000_000)


def produce(version: int, records: bytes | None = BATCH, topics: object = ...) -> bytes:
    data = ProduceRequest.TopicProduceData
    topic_data = (
        [data(name="t", partition_data=[data.PartitionProduceData(index=0, records=records)])]
        if topics is ...
        else topics
    )
    request = ProduceRequest[version](
        transactional_id=None, acks=-1, timeout_ms=1000, topic_data=topic_data
    )
    return bytes(request.encode())


@pytest.mark.parametrize("version", [3, 8, 9])
def test_a_whole_request_is_read_as_the_codec_reads_it(version: int) -> None:
    body = produce(version)
    decoded = decode_request(ProduceRequest, memoryview(body), version)
    assert decoded == ProduceRequest.decode(body, version=version)
    assert decoded.topic_data[0].partition_data[0].records == BATCH


def test_a_records_length_past_the_end_is_malformed() -> None:
    body = bytearray(produce(8))
    at = body.rindex(BATCH)
    struct.pack_into(">i", body, at - 4, 2**31 - 1)
    # The codec alone reads the batch as the records, as if the length were right.
    assert ProduceRequest.decode(bytes(body), version=8).topic_data[0].partition_data[0].records
    with pytest.raises(MalformedRequest, match="past the end"):
        decode_request(ProduceRequest, memoryview(body), 8)


@pytest.mark.parametrize("cut", [1, 5, 60])
def test_a_body_cut_short_is_malformed(cut: int) -> None:
    body = produce(9)[:-cut]
    with pytest.raises(MalformedRequest):
        decode_request(ProduceRequest, memoryview(body), 9)


def test_a_null_where_the_schema_has_none_is_malformed_and_named() -> None:
    with pytest.raises(MalformedRequest, match="non-nullable field TopicData was"):
        decode_request(ProduceRequest, memoryview(produce(9, topics=None)), 9)
    nested = ProduceRequest.TopicProduceData(name=None, partition_data=[])
    with pytest.raises(MalformedRequest, match="TopicData.Name"):
        decode_request(ProduceRequest, memoryview(produce(7, topics=[nested])), 7)
    join = JoinGroupRequest[5](
        group_id=None,
        session_timeout_ms=1,
        rebalance_timeout_ms=1,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[],
    )
    with pytest.raises(MalformedRequest, match="GroupId"):
        decode_request(JoinGroupRequest, memoryview(bytes(join.encode())), 5)


def test_a_null_where_the_schema_allows_one_is_read() -> None:
    # Null records (nullable in every version), a null topic list in Metadata v1+ (all topics).
    assert decode_request(ProduceRequest, memoryview(produce(9, records=None)), 9)
    metadata = MetadataRequest[9](
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    decoded = decode_request(MetadataRequest, memoryview(bytes(metadata.encode())), 9)
    assert decoded.topics is None


def test_a_string_that_is_not_utf8_is_malformed_in_a_short_message() -> None:
    body = produce(7).replace(b"\x00\x01t", b"\x00\x01\xff")
    with pytest.raises(MalformedRequest, match="not UTF-8") as refused:
        decode_request(ProduceRequest, memoryview(body), 7)
    assert len(str(refused.value)) < 100


def test_whole_entries() -> None:
    assert frames_whole_entries(BATCH)
    assert frames_whole_entries(BATCH * 3)
    assert not frames_whole_entries(b"")
    cut = len(BATCH) // 2
    assert not frames_whole_entries(BATCH[:cut])
    assert not frames_whole_entries(BATCH[cut:])
    assert not frames_whole_entries(BATCH + BATCH[:11])  # ends inside a length field
    too_long = bytearray(BATCH)
    struct.pack_into(">i", too_long, 8, 2**31 - 1)
    assert not frames_whole_entries(too_long)
    too_short = bytearray(BATCH + BATCH)
    struct.pack_into(">i", too_short, 8, 0)
    assert not frames_whole_entries(too_short)
