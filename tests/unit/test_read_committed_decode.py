"""A read_committed consumer's decode (client/fetched.py) skips aborted transactions' batches
from the answer's aborted list as Kafka's Java consumer does (CompletedFetch), in the C
decoder and in the per-batch loop (compressed batches) alike, and never hands out a control
record, at either isolation level."""

from __future__ import annotations

from kafka.record.legacy_records import LegacyRecordBatchBuilder

from seglog.client.config import ConsumerConfig
from seglog.client.fetched import CompletedFetch, aborted_batches, decode, next_offset_after
from seglog.client.structs import TopicPartition
from seglog.errors import InvalidConfigError
from seglog.records import RecordBatchBuilder
from seglog.records.batch import set_base_offset
from tests.txn_batches import ABORT, COMMIT, control_batch

TP = TopicPartition("t", 0)
COMMITTED, ABORTED, LATER = 1, 2, 3  # producer ids


def batch(producer_id, values, *, compression=0, sequence=0):
    builder = RecordBatchBuilder(
        compression=compression,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence if producer_id >= 0 else -1,
        is_transactional=producer_id >= 0,
    )
    for value in values:
        builder.append(None, value, 1000)
    return builder.build()


def log(*batches: bytes) -> bytes:
    """The batches laid out at consecutive offsets."""
    out = bytearray()
    offset = 0
    for b in batches:
        b = bytearray(b)
        set_base_offset(b, 0, offset)
        out += b
        offset += int.from_bytes(b[57:61], "big")  # recordCount
    return bytes(out)


def chunk(compression=0):
    """Producer 2's first transaction is aborted, its second committed; producer 1's and
    a plain batch interleave; producer 3 opens a transaction after 2's abort."""
    batches = [
        batch(COMMITTED, [b"c1", b"c2"], compression=compression),
        batch(ABORTED, [b"x1"], compression=compression),
        batch(-1, [b"plain"], compression=compression),
        batch(ABORTED, [b"x2", b"x3"], compression=compression, sequence=1),
        control_batch(ABORTED, ABORT),
        batch(ABORTED, [b"y1"], compression=compression, sequence=3),
        control_batch(COMMITTED, COMMIT),
        control_batch(ABORTED, COMMIT),
        batch(LATER, [b"z1"], compression=compression),
    ]
    return log(*batches)


def values(records: bytes, aborted=(), position=0) -> list[bytes]:
    fetch = CompletedFetch(TP, 0, records, next_offset_after(records, 0), tuple(aborted))
    pending = decode(fetch, position, check_crcs=True)
    assert pending.error is None
    return [r.value for r in pending.records]


def test_read_uncommitted_hands_out_every_data_record_and_no_control_record():
    for compression in (0, 1):
        assert values(chunk(compression)) == [
            b"c1",
            b"c2",
            b"x1",
            b"plain",
            b"x2",
            b"x3",
            b"y1",
            b"z1",
        ]


def test_read_committed_skips_the_aborted_transactions_batches_only():
    # Producer 2's aborted transaction began at offset 2 (x1).
    for compression in (0, 1):  # the C decoder, then the per-batch loop (gzip)
        assert values(chunk(compression), aborted=[(ABORTED, 2)]) == [
            b"c1",
            b"c2",
            b"plain",
            b"y1",
            b"z1",
        ]


def test_an_aborted_transaction_listed_past_a_batch_does_not_skip_it():
    """A producer is aborted only from its listed first offset on (Kafka's
    consumeAbortedTransactionsUpTo): its earlier batches are another transaction's."""
    records = chunk()
    assert values(records, aborted=[(ABORTED, 4)]) == [
        b"c1",
        b"c2",
        b"x1",
        b"plain",
        b"y1",
        b"z1",
    ]
    assert aborted_batches(records, [(LATER, 100)]) == set()


def test_decoding_from_a_position_inside_the_chunk_still_skips():
    assert values(chunk(), aborted=[(ABORTED, 2)], position=4) == [b"y1", b"z1"]


def test_isolation_level_is_checked():
    assert ConsumerConfig(isolation_level="read_committed").isolation_level == "read_committed"
    try:
        ConsumerConfig(isolation_level="read-committed")
    except InvalidConfigError as exc:
        assert "isolation_level" in str(exc)
    else:
        raise AssertionError("a misspelt isolation level was taken")


def test_legacy_entries_before_transactions_do_not_stop_the_skipping():
    """A log written by old clients, then by transactional ones: the old entries are passed
    over, the aborted batches after them still skipped."""
    legacy = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    for i in range(2):
        legacy.append(i, 1000, None, b"old%d" % i)
    records = bytes(legacy.build()) + log(
        batch(-1, [b"p1", b"p2"]),  # v2 offsets from 0: 0-1
        batch(ABORTED, [b"x1"]),  # 2
        control_batch(ABORTED, ABORT),  # 3
        batch(COMMITTED, [b"c1"]),  # 4
    )
    assert values(records, aborted=[(ABORTED, 2)], position=2) == [b"c1"]
    assert values(records, aborted=[(ABORTED, 2)]) == [b"old0", b"old1", b"p1", b"p2", b"c1"]
