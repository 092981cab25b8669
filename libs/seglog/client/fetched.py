"""What a consumer's fetch brings and how it becomes records: a Fetch request of partitions at
their offsets (the gRPC and bulk paths), the bytes as fetched (`CompletedFetch`, read by the
fetch thread only as far as batch headers: `next_offset_after`), and their decoding from the
caller's position (`decode`, on the caller's thread) into `Pending` records.

Transactions: control batches (COMMIT/ABORT markers) are never handed out. A read_committed
fetch's answer lists the transactions aborted in its range (producer id, first offset);
their batches are skipped as Kafka's Java consumer skips them (CompletedFetch): going
through the batches in order, a producer becomes aborted at the first listed offset at or
below a batch's last offset, its transactional batches are skipped while it is, and its
ABORT marker ends that. Which batches go is found from batch headers alone
(`aborted_batches`), only for a fetch with aborted transactions; the C decoder passes over
them by base offset, with no Python work per record.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import CorruptRecordError, SeglogError
from ..records import Record, iter_batches
from ..records._scan import decode_chunk
from ..records.batch import (
    CONTROL_MASK,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_MASK,
    RecordBatch,
    read_header,
)
from ..records.legacy import LegacyMessage, records_of
from ..records.record import CREATE_TIME, LOG_APPEND_TIME
from ..v1 import common_pb2
from .structs import TopicPartition

_HEADER = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23  # after baseOffset, length, leader epoch, magic, crc, attributes
_MAGIC_AT = 16  # after baseOffset, length, leader epoch
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 ABORT, 1 COMMIT)
_ABORT = 0
READ_UNCOMMITTED = 0  # Kafka's isolation level (config.ISOLATION_LEVELS)


@dataclass
class CompletedFetch:
    tp: TopicPartition
    epoch: int
    records: bytes | memoryview
    next_offset: int
    # read_committed: the transactions aborted in this range, (producer id, first offset).
    aborted: tuple[tuple[int, int], ...] = ()


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
    isolation_level: int = READ_UNCOMMITTED,
) -> common_pb2.FetchRequest:
    """A consumer's Fetch of `partitions` at their offsets (the gRPC and bulk paths)."""
    request = common_pb2.FetchRequest(
        min_bytes=min_bytes,
        max_wait_ms=max_wait_ms,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
    )
    for tp, offset in partitions:
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            fetch_offset=offset,
            partition_max_bytes=partition_max_bytes,
        )
    return request


def aborted_batches(records: bytes | memoryview, aborted: Sequence[tuple[int, int]]) -> set[int]:
    """The base offsets of the batches of aborted transactions in `records` (Kafka's
    CompletedFetch logic, from headers; a control batch's first record for its type)."""
    if not aborted:
        return set()
    waiting = sorted(aborted, key=lambda a: a[1], reverse=True)  # popped lowest first
    aborted_producers: set[int] = set()
    skip: set[int] = set()
    pos, end = 0, len(records)
    while end - pos >= HEADER_BYTES:
        base_offset, length = _HEADER.unpack_from(records, pos)
        if length < 0 or pos + LOG_OVERHEAD + length > end:
            break
        if records[pos + _MAGIC_AT] < 2 or length < MIN_BATCH_LENGTH:
            pos += LOG_OVERHEAD + length  # a legacy entry (no transactions), passed over
            continue
        header = read_header(records, pos)
        if header.producer_id >= 0:
            while waiting and waiting[-1][1] <= header.last_offset:
                aborted_producers.add(waiting.pop()[0])
            if header.attributes & CONTROL_MASK:
                if _is_abort_marker(records, pos):
                    aborted_producers.discard(header.producer_id)
            elif header.attributes & TRANSACTIONAL_MASK and (
                header.producer_id in aborted_producers
            ):
                skip.add(base_offset)
        pos += LOG_OVERHEAD + length
    return skip


def _is_abort_marker(records: bytes | memoryview, pos: int) -> bool:
    try:
        first = RecordBatch(records, pos).records()[0]
    except (SeglogError, ValueError, IndexError, struct.error):
        return False  # a marker that does not decode ends nothing (the decode names it)
    key = first.key or b""
    return len(key) >= _CONTROL_KEY.size and _CONTROL_KEY.unpack_from(key)[1] == _ABORT


def decode(fetch: CompletedFetch, position: int, *, check_crcs: bool) -> Pending:
    """The fetch's records from `position` on; a batch that fails its CRC or does not
    decode ends them, recorded on the result with the offset it sits at."""
    topic, partition = fetch.tp
    out: list[Record] = []
    pending = Pending(fetch.tp, fetch.epoch, out, 0, fetch.next_offset)
    skip = aborted_batches(fetch.records, fetch.aborted) if fetch.aborted else None
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
        skip,
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
            aborted = skip is not None and header.base_offset in skip
            if header.last_offset >= position and not header.is_control and not aborted:
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
