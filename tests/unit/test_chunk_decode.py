"""A consumer's decode of a fetched chunk (client/fetched.py: one C call for the chunk's
uncompressed v2 batches, then the per-batch loop) against the per-batch loop alone, as it
was before: the same records, batch starts and epochs, and the same error at the same offset,
for chunks of every kind of batch, changed bytes, cut ends and any start position."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.client.fetched import CompletedFetch, Pending, decode
from seglog.client.structs import TopicPartition
from seglog.errors import CorruptRecordError, SeglogError
from seglog.records import Record, RecordBatchBuilder, iter_batches
from seglog.records.batch import CRC_OFFSET, compute_crc, read_header, stamp_log_append_time
from seglog.records.legacy import LegacyMessage, records_of

TP = TopicPartition("t", 3)


def reference_decode(fetch: CompletedFetch, position: int, *, check_crcs: bool) -> Pending:
    """The fetch's records from `position` on; a batch that fails its CRC or does not
    decode ends them, recorded on the result with the offset it sits at."""
    topic, partition = fetch.tp
    out: list[Record] = []
    pending = Pending(fetch.tp, fetch.epoch, out, 0, fetch.next_offset)
    reached = position  # the offset after the last batch decoded
    try:
        for batch in iter_batches(fetch.records, validate=check_crcs):
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


BATCH = st.tuples(
    st.integers(1, 6),  # records
    st.integers(0, 40),  # value bytes
    st.sampled_from([0, 0, 0, 1]),  # codec: none, gzip
    st.sampled_from(["create", "create", "append", "control"]),
    st.integers(0, 4),  # partitionLeaderEpoch
    st.booleans(),  # headers
)


def build(spec, base_offset: int) -> bytes:
    count, size, codec, kind, epoch, with_headers = spec
    builder = RecordBatchBuilder(
        compression=codec,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        producer_id=5 if kind == "control" else -1,
        producer_epoch=0 if kind == "control" else -1,
        is_transactional=kind == "control",
    )
    headers = [("h", b"v"), ("n", None)] if with_headers else None
    for i in range(count):
        builder.append(b"k%d" % i if i % 2 else None, b"x" * size, 1_000 + i, headers)
    raw = bytearray(builder.build())
    if kind == "append":
        stamp_log_append_time(raw, 0, 9_999)
    if kind == "control":  # the control bit set, the CRC made right again
        (attributes,) = struct.unpack_from(">h", raw, 21)
        struct.pack_into(">h", raw, 21, attributes | 0x20)
        raw[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(raw, 0, len(raw)).to_bytes(4, "big")
    return bytes(raw)


@st.composite
def chunk(draw) -> bytes:
    parts, offset = [], 0
    for spec in draw(st.lists(BATCH, min_size=1, max_size=5)):
        parts.append(build(spec, offset))
        offset += spec[0] + draw(st.sampled_from([0, 0, 2]))
    raw = bytearray(b"".join(parts))
    for position, value in draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)))):
        raw[position % len(raw)] = value
    if draw(st.booleans()):  # CRCs made right again: changes reach the record checks
        pos = 0
        while len(raw) - pos >= 61:
            header = read_header(raw, pos)
            if header.batch_length < 49 or pos + header.size_in_bytes > len(raw):
                break
            raw[pos + CRC_OFFSET : pos + CRC_OFFSET + 4] = compute_crc(
                raw, pos, header.size_in_bytes
            ).to_bytes(4, "big")
            pos += header.size_in_bytes
    cut = draw(st.sampled_from([0, 0, 0, 5, 30, 70]))
    return bytes(raw[: max(0, len(raw) - cut)])


def summary(pending: Pending):
    return (
        pending.records,
        pending.batch_starts,
        pending.batch_epochs,
        pending.error_offset,
        None if pending.error is None else (type(pending.error), str(pending.error)),
    )


@settings(max_examples=400, deadline=None)
@given(chunk(), st.integers(0, 30), st.booleans())
def test_the_chunk_decode_gives_what_the_per_batch_loop_gives(raw, position, check_crcs):
    fetch = CompletedFetch(TP, 1, raw, 0)
    assert summary(decode(fetch, position, check_crcs=check_crcs)) == summary(
        reference_decode(fetch, position, check_crcs=check_crcs)
    )


def test_records_of_uncompressed_batches_come_whole_from_the_chunk_decode():
    raw = build((3, 5, 0, "create", 2, True), 0) + build((2, 5, 0, "append", 4, False), 3)
    pending = decode(CompletedFetch(TP, 1, raw, 0), 1, check_crcs=True)
    assert [r.offset for r in pending.records] == [1, 2, 3, 4]
    assert [r.timestamp_ms for r in pending.records] == [1_001, 1_002, 9_999, 9_999]
    assert pending.batch_starts == [0, 2] and pending.batch_epochs == [2, 4]
    assert pending.records[0].headers == (("h", b"v"), ("n", None))
    assert pending.error is None
