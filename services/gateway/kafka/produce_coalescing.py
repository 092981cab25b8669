"""Produce requests a connection has queued, written as one append per partition.

A connection is served one request at a time (connection.py), and an acks=all produce waits
for the followers, several milliseconds under load. A producer that keeps many requests in
flight (librdkafka without idempotence: a million) then queues small requests faster than
they are served, and its latency grows without bound (measured: 1,000 records/s at
linger.ms=1 gave 8 s p50). So the requests already waiting on the socket are taken together:
each partition's batches from all of them, in request order, go to the gateway as one
append (the broker core's produce, every topic's leaders at once), and each request gets its
own response, its base offsets worked out from the batch headers (never the records) of the
requests before it. Order is kept: the batches are appended in the order they were sent.

Only requests that mean the same thing merged as apart are merged: the same acks (not 0), no
transactional id, each partition named once, and no idempotent batch. An idempotent retry
may be a duplicate, which the log answers with its first offsets only when it is the whole
append, so idempotent producers (at most five requests in flight) are served request by
request; so are requests whose record sets are not whole batches by their length fields (no
request is merged into a batch it did not send whole). A merged append fails or succeeds as
a whole, so a malformed batch fails the requests merged with it too — each of them gets the
error.
"""

from __future__ import annotations

import struct
from typing import Any

from seglog.records.batch import HEADER, LAST_OFFSET_DELTA_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD
from seglog.records.checks import frames_whole_entries

from ..routing.data_plane import PartitionRecords, ProducedPartition, TopicProduce

PRODUCER_ID_OFFSET = struct.calcsize(">qiibIhiqq")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def offsets_in(records: bytes) -> int:
    """How many offsets RecordBatch v2 batches take (each its lastOffsetDelta + 1), read
    from their headers alone."""
    count, position = 0, 0
    while position + HEADER.size <= len(records):
        (length,) = _INT32.unpack_from(records, position + LENGTH_OFFSET)
        (last_offset_delta,) = _INT32.unpack_from(records, position + LAST_OFFSET_DELTA_OFFSET)
        count += last_offset_delta + 1
        position += LOG_OVERHEAD + length
    return count


def _idempotent(records: bytes | None) -> bool:
    """Whether the first batch carries a producer id (idempotent or transactional)."""
    if not records or len(records) < HEADER.size:
        return False
    (producer_id,) = _INT64.unpack_from(records, PRODUCER_ID_OFFSET)
    return bool(producer_id >= 0)


def mergeable(request: Any) -> bool:
    """Whether `request` means the same merged as alone. Its record sets must be whole
    entries (by their length fields): two requests each holding one half of a batch would
    otherwise be appended as that batch, though neither was valid alone; a request that is
    not is served alone, and refused alone (CORRUPT_MESSAGE)."""
    if request.acks == 0 or request.transactional_id is not None:
        return False
    named = [(t.name, p.index) for t in request.topic_data for p in t.partition_data]
    if not named or len(named) != len(set(named)):
        return False
    return all(
        p.records and frames_whole_entries(p.records) and not _idempotent(p.records)
        for t in request.topic_data
        for p in t.partition_data
    )


def runs(requests: list[Any]) -> list[list[int]]:
    """The requests' indexes in order, consecutive mergeable ones of equal acks together."""
    groups: list[list[int]] = []
    for i, request in enumerate(requests):
        previous = groups[-1] if groups else None
        if (
            previous is not None
            and mergeable(request)
            and mergeable(requests[previous[-1]])
            and requests[previous[-1]].acks == request.acks
        ):
            previous.append(i)
        else:
            groups.append([i])
    return groups


def merged_topics(requests: list[Any]) -> list[TopicProduce]:
    """Every partition's batches from `requests`, in order, as one produce per topic (each
    partition's buffers written one after the other, not joined here)."""
    by_topic: dict[str, dict[int, list[bytes]]] = {}
    for request in requests:
        for topic in request.topic_data:
            partitions = by_topic.setdefault(topic.name, {})
            for data in topic.partition_data:
                partitions.setdefault(data.index, []).append(data.records or b"")
    acks, timeout_ms = requests[0].acks, max(r.timeout_ms for r in requests)
    return [
        TopicProduce(
            name,
            acks,
            timeout_ms,
            [PartitionRecords(index, parts) for index, parts in partitions.items()],
        )
        for name, partitions in by_topic.items()
    ]


def split_results(
    requests: list[Any], merged: dict[tuple[str, int], ProducedPartition]
) -> list[dict[tuple[str, int], ProducedPartition]]:
    """Each request's own results from the merged append's: its base offset is the merged
    one plus the offsets the earlier requests' batches took in that partition."""
    taken: dict[tuple[str, int], int] = {}
    out = []
    for request in requests:
        results = {}
        for topic in request.topic_data:
            for data in topic.partition_data:
                key = (topic.name, data.index)
                result = merged[key]
                if result.error is None:
                    before, count = taken.get(key, 0), offsets_in(data.records or b"")
                    result = result._replace(base_offset=result.base_offset + before)
                    taken[key] = before + count
                results[key] = result
        out.append(results)
    return out
