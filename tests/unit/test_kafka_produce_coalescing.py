"""Coalescing queued Kafka produce requests (produce_coalescing.py): which requests merge,
the merged request's batches in order, and each request's own offsets split back out."""

from __future__ import annotations

from kafka.protocol.producer import ProduceRequest

from seglog.errors import NotEnoughReplicasError
from seglog.records.builder import RecordBatchBuilder
from services.gateway.kafka import produce_coalescing as coalescing
from services.gateway.routing.data_plane import ProducedPartition
from tests.batches import make_batch


def idempotent_batch(count: int) -> bytes:
    builder = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0)
    for i in range(count):
        builder.append(None, b"%d" % i, 1_700_000_000_000, None)
    return builder.build()


def request(acks=-1, transactional_id=None, **partitions):
    """partitions: 'topic_partition' -> records."""
    by_topic = {}
    for key, records in partitions.items():
        topic, partition = key.rsplit("_", 1)
        by_topic.setdefault(topic, []).append((int(partition), records))
    return ProduceRequest[9](
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=r)
                    for p, r in parts
                ],
            )
            for topic, parts in by_topic.items()
        ],
    )


def test_offsets_are_counted_from_batch_headers():
    records = make_batch([b"a", b"b", b"c"]) + make_batch([b"d"]) + make_batch([b"e", b"f"])
    assert coalescing.offsets_in(records) == 6
    assert coalescing.offsets_in(b"") == 0


def test_only_consecutive_requests_that_mean_the_same_merged_merge():
    plain = request(t_0=make_batch([b"x"]))
    requests = [
        plain,
        request(t_0=make_batch([b"y"]), t_1=make_batch([b"z"])),
        request(acks=1, t_0=make_batch([b"other acks"])),
        request(acks=1, t_0=make_batch([b"same acks"])),
        request(acks=0, t_0=make_batch([b"no answer"])),
        request(t_0=idempotent_batch(2)),
        request(transactional_id="tx", t_0=make_batch([b"tx"])),
        plain,
    ]
    assert coalescing.runs(requests) == [[0, 1], [2, 3], [4], [5], [6], [7]]


def test_merged_batches_keep_request_order_and_each_request_gets_its_offsets():
    first = request(t_0=make_batch([b"a", b"b"]), u_0=make_batch([b"u"]))
    second = request(t_0=make_batch([b"c"]), t_1=make_batch([b"d", b"e", b"f"]))
    third = request(t_0=make_batch([b"g", b"h", b"i"]))
    merged = coalescing.merged_topics([first, second, third])
    topics = {t.topic: {p.partition: p.batches for p in t.partitions} for t in merged}
    # Each request's buffer as it came, in request order: written out one after the other.
    assert topics["t"][0] == [
        first.topic_data[0].partition_data[0].records,
        second.topic_data[0].partition_data[0].records,
        third.topic_data[0].partition_data[0].records,
    ]
    assert coalescing.offsets_in(b"".join(topics["t"][0])) == 6 and set(topics) == {"t", "u"}
    refused = NotEnoughReplicasError("below min.insync.replicas")
    results = coalescing.split_results(
        [first, second, third],
        {
            ("t", 0): ProducedPartition(0, None, 100),
            ("t", 1): ProducedPartition(1, None, 40),
            ("u", 0): ProducedPartition(0, refused),
        },
    )
    assert results[0][("t", 0)].base_offset == 100
    assert (results[1][("t", 0)].base_offset, results[1][("t", 1)].base_offset) == (102, 40)
    assert results[2][("t", 0)].base_offset == 103
    assert results[0][("u", 0)].error is refused
