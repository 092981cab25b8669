"""What a consumer's fetch brings and how it becomes records: a Fetch request of partitions at
their offsets (the gRPC and bulk paths), the bytes as fetched (`CompletedFetch`, read by the
fetch thread only as far as batch headers: `next_offset_after`), and their decoding from the
caller's position (`decode`, on the caller's thread) into `Pending` records."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import CorruptRecordError, SeglogError
from ..records import Record, iter_batches
from ..records._scan import decode_chunk
from ..records.legacy import LegacyMessage, records_of
from ..records.record import CREATE_TIME, LOG_APPEND_TIME
from ..v1 import common_pb2
from .structs import TopicPartition

_HEADER = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23  # after baseOffset, length, leader epoch, magic, crc, attributes


@dataclass
class CompletedFetch:
    tp: TopicPartition
    epoch: int
    records: bytes | memoryview
    next_offset: int


@dataclass
class Pending:
    """A completed fetch decoded for the caller: its records from the position on, how far
    the caller has taken them (`index`), and where each batch starts."""

    tp: TopicPartition
    epoch: int
    records: list[Record]
    index: int
    next_offset: int
    # Where each batch's records start in `records`, and its partition leader epoch.
    batch_starts: list[int] = field(default_factory=list)
    batch_epochs: list[int] = field(default_factory=list)
    # A batch that would not decode: its records stop here, and once the records before it
    # are handed out the partition waits at `error_offset` with this error.
    error: SeglogError | None = None
    error_offset: int = 0


def next_offset_after(records: bytes | memoryview, start: int) -> int:
    """The offset after the last whole batch in `records` (headers only)."""
    pos = 0
    end = len(records)
    next_offset = start
    while end - pos >= 27:
        base_offset, length = _HEADER.unpack_from(records, pos)
        if pos + 12 + length > end:
            break
        if records[pos + 16] >= 2:
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(records, pos + _LAST_OFFSET_DELTA_AT)
            next_offset = base_offset + delta + 1
        else:
            # Legacy entries: a wrapper's offset is that of its last inner message.
            next_offset = base_offset + 1
        pos += 12 + length
    return next_offset


def fetch_request(
    partitions: Sequence[tuple[TopicPartition, int]],
    *,
    min_bytes: int,
    max_wait_ms: int,
    max_bytes: int,
    partition_max_bytes: int,
) -> common_pb2.FetchRequest:
    """A consumer's Fetch of `partitions` at their offsets (the gRPC and bulk paths)."""
    request = common_pb2.FetchRequest(
        min_bytes=min_bytes, max_wait_ms=max_wait_ms, max_bytes=max_bytes
    )
    for tp, offset in partitions:
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            fetch_offset=offset,
            partition_max_bytes=partition_max_bytes,
        )
    return request


def decode(fetch: CompletedFetch, position: int, *, check_crcs: bool) -> Pending:
    """The fetch's records from `position` on; a batch that fails its CRC or does not
    decode ends them, recorded on the result with the offset it sits at."""
    topic, partition = fetch.tp
    out: list[Record] = []
    pending = Pending(fetch.tp, fetch.epoch, out, 0, fetch.next_offset)
    # One C call takes the chunk's uncompressed v2 batches (all of them, usually: no Python
    # work per batch); the loop below goes on from the first batch it did not take (legacy,
    # compressed, or one it found wrong, which the loop names).
    stop, reached = decode_chunk(
        fetch.records,
        Record,
        topic,
        partition,
        position,
        check_crcs,
        CREATE_TIME,
        LOG_APPEND_TIME,
        out,
        pending.batch_starts,
        pending.batch_epochs,
    )
    try:
        for batch in iter_batches(fetch.records, validate=check_crcs, start=stop):
            if isinstance(batch, LegacyMessage):
                pending.batch_starts.append(len(out))
                pending.batch_epochs.append(-1)  # legacy entries carry no leader epoch
                out.extend(
                    r._replace(topic=topic, partition=partition)
                    for r in records_of(batch)
                    if r.offset >= position
                )
                reached = max(reached, batch.offset + 1)
                continue
            header = batch.header
            if header.last_offset >= position and not header.is_control:
                records = batch.records(topic, partition)
                if records and records[0].offset < position:
                    records = [r for r in records if r.offset >= position]
                if records:
                    pending.batch_starts.append(len(out))
                    pending.batch_epochs.append(header.partition_leader_epoch)
                out.extend(records)
            reached = max(reached, header.last_offset + 1)
    except (SeglogError, ValueError, IndexError, struct.error) as exc:
        pending.error_offset = reached
        pending.error = CorruptRecordError(
            f"{topic}-{partition}: the batch at offset {reached} is corrupt ({exc}); "
            "seek past it to go on reading"
        )
    return pending
