"""The Fetch answer in buffers (services/gateway/kafka/fetch_encoding.py) is byte for byte
the codec's, at every served version, with and without the tagged fields, and leaves large
record sets as the views they are."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer import FetchResponse

from services.gateway.kafka.fetch_encoding import INLINE_RECORDS_BYTES, encode_fetch_response


def response(version: int, records: list[bytes], *, moved: bool, session_id: int = 7):
    response_class = FetchResponse[version]
    topic_class = response_class.FetchableTopicResponse
    partition_class = topic_class.PartitionData
    topics = []
    for t in range(2):
        partitions = [
            partition_class(
                partition_index=i,
                error_code=6 if moved and i == 1 else 0,
                high_watermark=1000 + i,
                last_stable_offset=1000 + i,
                log_start_offset=i,
                aborted_transactions=[],
                preferred_read_replica=-1,
                records=memoryview(data),
                current_leader=partition_class.LeaderIdAndEpoch(leader_id=3, leader_epoch=9)
                if moved and i == 1
                else None,
            )
            for i, data in enumerate(records)
        ]
        named = {"topic_id": uuid.UUID(int=t + 1)} if version >= 13 else {"topic": f"topic-{t}"}
        topics.append(topic_class(partitions=partitions, **named))
    return response_class(
        throttle_time_ms=5,
        error_code=0,
        session_id=session_id,
        responses=topics,
        node_endpoints=[response_class.NodeEndpoint(node_id=3, host="h", port=9092, rack=None)]
        if moved
        else [],
    )


@pytest.mark.parametrize("version", range(4, 18))
@pytest.mark.parametrize("moved", [False, True])
def test_the_buffers_are_the_codecs_bytes(version, moved):
    records = [b"", b"x" * 100, bytes(range(256)) * 300]
    answer = response(version, records, moved=moved)
    pieces = encode_fetch_response(answer, version, 42)
    answer.with_header(correlation_id=42)
    assert b"".join(pieces) == bytes(answer.encode(header=True, framed=True))


def test_large_record_sets_stay_views_and_small_ones_are_copied_in():
    big = bytes(INLINE_RECORDS_BYTES)
    answer = response(17, [b"small", big], moved=False)
    pieces = encode_fetch_response(answer, 17, 1)
    views = [p for p in pieces if isinstance(p, memoryview)]
    assert len(views) == 2 and all(v.obj is big for v in views)  # one per topic
    assert len(pieces) == 5  # fields, big, fields, big, fields


@pytest.mark.parametrize("version", range(4, 18))
def test_aborted_transactions_are_the_codecs_bytes(version):
    """A read_committed answer lists its aborted transactions (each a struct with its own
    tagged fields from v12), a read_uncommitted one answers them null."""
    answer = response(version, [b"x" * 10, b"y" * 10], moved=False)
    aborted_class = FetchResponse[version].FetchableTopicResponse.PartitionData.AbortedTransaction
    first, second = answer.responses[0].partitions
    first.aborted_transactions = [aborted_class(producer_id=5, first_offset=0)]
    first.last_stable_offset = 7
    second.aborted_transactions = None
    pieces = encode_fetch_response(answer, version, 42)
    answer.with_header(correlation_id=42)
    assert b"".join(pieces) == bytes(answer.encode(header=True, framed=True))
