import struct
import zlib
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from seglog.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from seglog.records import (
    CompressionType,
    RecordBatch,
    RecordBatchBuilder,
    iter_batches,
    iter_records,
    upconvert,
)
from seglog.records import record as record_module
from seglog.records.batch import read_header, stamp_log_append_time
from seglog.records.record import Record
from seglog.records.varint import decode_varint, encode_varint

CODECS = list(CompressionType)

# A batch Kafka's format spec fixes byte for byte: one record, key b"k", value b"v",
# timestamp 1000, no compression; CRC-32C computed independently (kafka-python agrees below).
GOLDEN_ONE_RECORD = bytes.fromhex(
    "0000000000000000"  # baseOffset 0
    "0000003a"  # batchLength 58
    "ffffffff"  # partitionLeaderEpoch -1
    "02"  # magic 2
)

# The same batch from kafka-python's builder (an independent implementation), hex.
GOLDEN_FROM_KAFKA_PYTHON = bytes.fromhex(
    "00000000000000000000003a0000000002716a618900000000000000000000000003e800000000000003e8"
    "ffffffffffffffffffffffffffff0000000110000000026b027600"
)


def test_varint_round_trips_edges():
    for value in (
        0,
        -1,
        1,
        63,
        -64,
        64,
        8191,
        -8192,
        8192,
        2**31 - 1,
        -(2**31),
        2**63 - 1,
        -(2**63),
    ):
        encoded = encode_varint(value)
        assert decode_varint(encoded, 0) == (value, len(encoded))
    assert (
        encode_varint(0) == b"\x00" and encode_varint(-1) == b"\x01" and encode_varint(1) == b"\x02"
    )
    assert encode_varint(300) == bytes([0xD8, 0x04])


def test_varint_cut_short_is_a_corrupt_record():
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        decode_varint(b"\xff\xff", 0)


def test_golden_bytes_of_a_one_record_batch():
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", 1000)
    raw = builder.build()
    assert raw[:17] == GOLDEN_ONE_RECORD
    # attributes 0, lastOffsetDelta 0, base/max timestamp 1000, producer -1/-1/-1, count 1
    assert raw[21:61] == struct.pack(">hiqqqhii", 0, 0, 1000, 1000, -1, -1, -1, 1)
    # record: length 8, attrs 0, tsDelta 0, offsetDelta 0, key len 1 'k', value len 1 'v', 0 headers
    assert raw[61:] == bytes([0x10, 0, 0, 0, 0x02]) + b"k" + bytes([0x02]) + b"v" + b"\x00"
    # kafka-python writes partitionLeaderEpoch 0 where Kafka's producer writes -1; the
    # field is outside the CRC, and every other byte (the CRC included) must agree.
    assert raw[:12] + raw[16:] == GOLDEN_FROM_KAFKA_PYTHON[:12] + GOLDEN_FROM_KAFKA_PYTHON[16:]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_seglog_batches_decode_in_kafka_python(codec):
    builder = RecordBatchBuilder(compression=codec)
    builder.append(b"key", b"value" * 50, 1000, [("h1", b"x"), ("h2", None)])
    builder.append(None, None, 1005)
    builder.append(b"", b"", 999)
    raw = builder.build()
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [
        (0, 1000, b"key", b"value" * 50, [("h1", b"x"), ("h2", None)]),
        (1, 1005, None, None, []),
        (2, 999, b"", b"", []),
    ]
    assert batch.max_timestamp == 1005


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_batches_decode_in_seglog(codec):
    kb = DefaultRecordBatchBuilder(2, int(codec), 0, -1, -1, -1, 1 << 20)
    kb.append(0, 10, b"a", b"b" * 300, [("k", b"v")])
    kb.append(1, 11, None, None, [])
    raw = bytes(kb.build())
    batch = RecordBatch(raw)
    batch.validate()
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in batch.records()] == [
        (0, 10, b"a", b"b" * 300, (("k", b"v"),)),
        (1, 11, None, None, ()),
    ]


def test_append_many_builds_the_same_bytes_as_append():
    values = [b"x" * n for n in range(0, 300, 7)]
    keys = [None if n % 3 else b"k%d" % n for n in range(len(values))]
    one = RecordBatchBuilder()
    for key, value in zip(keys, values, strict=True):
        one.append(key, value, 5000)
    many = RecordBatchBuilder()
    assert many.append_many(values, keys, timestamp_ms=5000) == len(values)
    assert one.build() == many.build()


def test_builder_refuses_records_past_max_bytes_but_always_takes_the_first():
    builder = RecordBatchBuilder(max_bytes=200)
    assert builder.append(None, b"x" * 500, 1) == 1  # the record count
    assert builder.append(None, b"y", 1) == 0
    assert builder.record_count == 1


def test_append_value_writes_kafka_python_bytes_at_the_edges_of_its_tables():
    # Value lengths and timestamp deltas around where the varint tables end, where
    # append_value hands the record to the general path.
    lengths = [0, 1, 63, 64, 16_370, 16_371, 16_372, 16_383, 16_384, 16_385, 20_000]
    deltas = [0, 8191, 8192, -8192, -8193, 10**12]
    ours = RecordBatchBuilder()
    theirs = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    base_ms = 1_700_000_000_000
    for i, (n, delta_ms) in enumerate((n, d) for n in lengths for d in deltas):
        assert ours.append_value(b"v" * n, base_ms + delta_ms) == i + 1
        theirs.append(i, base_ms + delta_ms, None, b"v" * n, [])
    built, expected = ours.build(), bytes(theirs.build())
    assert built[:12] + built[16:] == expected[:12] + expected[16:]


def test_append_value_refuses_a_record_past_max_bytes_and_adds_nothing():
    builder = RecordBatchBuilder(max_bytes=300)
    assert builder.append_value(b"x" * 100, 1) == 1
    assert builder.append_value(b"x" * 100, 2) == 2
    size = builder.size_in_bytes
    assert builder.append_value(b"x" * 100, 3) == 0
    assert (builder.record_count, builder.size_in_bytes) == (2, size)
    batch = RecordBatch(builder.build())
    assert [r.timestamp_ms for r in batch.records()] == [1, 2]


_FIELD = st.one_of(
    st.none(),
    st.binary(max_size=300),
    st.integers(min_value=16_000, max_value=20_000).map(lambda n: b"b" * n),  # long varints
)
_HEADERS = st.lists(
    st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
)
_TIMESTAMP_DELTA = st.one_of(
    st.integers(min_value=-100, max_value=100), st.integers(min_value=-(10**10), max_value=10**10)
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_FIELD, _FIELD, _TIMESTAMP_DELTA, _HEADERS), min_size=1, max_size=30))
def test_builder_writes_the_bytes_kafka_python_writes_for_any_records(records):
    ours = RecordBatchBuilder()
    theirs = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    base_ms = 1_700_000_000_000
    for i, (key, value, delta_ms, headers) in enumerate(records):
        assert ours.append(key, value, base_ms + delta_ms, headers) == i + 1
        theirs.append(i, base_ms + delta_ms, key, value, headers)
    built, expected = ours.build(), bytes(theirs.build())
    # Byte for byte but partitionLeaderEpoch (outside the CRC): kafka-python writes 0 where
    # Kafka's producer writes -1.
    assert built[:12] + built[16:] == expected[:12] + expected[16:]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_FIELD, _FIELD, _TIMESTAMP_DELTA, _HEADERS), min_size=1, max_size=30),
    st.booleans(),
)
def test_the_c_decoder_reads_what_kafka_python_wrote_as_the_python_loop_does(
    records, log_append_time
):
    theirs = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    base_ms = 1_700_000_000_000
    for i, (key, value, delta_ms, headers) in enumerate(records):
        theirs.append(i, base_ms + delta_ms, key, value, headers)
    raw = bytearray(theirs.build())
    if log_append_time:
        stamp_log_append_time(raw, 0, base_ms + 5)
    batch = RecordBatch(bytes(raw))
    decoded = batch.records("t", 3)
    expected = [
        (i, base_ms + 5 if log_append_time else base_ms + d, k, v, tuple(h))
        for i, (k, v, d, h) in enumerate(records)
    ]
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in decoded] == expected
    assert all(type(r) is Record and (r.topic, r.partition) == ("t", 3) for r in decoded)
    # The Python loop, which names problems, agrees.
    with mock.patch.object(record_module, "decode_section", _refuse):
        assert batch.records("t", 3) == decoded


# Headers from a small alphabet, so that neighbouring records often repeat a key, a pair or
# all their headers (which the C decoder then shares) and often differ in just one of them.
_REPEATING_HEADERS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "é"]), st.sampled_from([None, b"", b"1", b"2"])),
    max_size=10,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_REPEATING_HEADERS, min_size=1, max_size=30))
def test_the_c_decoder_shares_repeated_headers_only_where_they_are_equal(headers_per_record):
    builder = RecordBatchBuilder()
    for headers in headers_per_record:
        builder.append(b"k", b"v", 1_700_000_000_000, headers)
    batch = RecordBatch(builder.build())
    decoded = batch.records("t", 3)
    assert [r.headers for r in decoded] == [tuple(h) for h in headers_per_record]
    with mock.patch.object(record_module, "decode_section", _refuse):
        assert batch.records("t", 3) == decoded


def _refuse(*args):
    raise ValueError("forced")


def test_the_c_decoder_hands_a_malformed_section_to_the_loop_that_names_it():
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", 1_700_000_000_000)
    raw = bytearray(builder.build())
    raw[-1] = 0x02  # the record's header count says one header, and none follows
    header = read_header(bytes(raw))
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        record_module.decode_records(bytes(raw[61:]), header)


def test_bad_crc_is_reported_with_both_values():
    raw = bytearray(_one_batch())
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="stored CRC-32C .* computed"):
        RecordBatch(bytes(raw)).validate()


def test_wrong_magic_and_unknown_codec_are_distinct_errors():
    raw = bytearray(_one_batch())
    raw[16] = 7
    with pytest.raises(InvalidRecordError, match="expected magic 2, found 7"):
        RecordBatch(bytes(raw))
    raw = bytearray(_one_batch())
    raw[22] |= 0x07  # codec 7
    with pytest.raises(UnsupportedCompressionError):
        RecordBatch(bytes(raw))


def test_truncated_batch_is_a_corrupt_record():
    raw = _one_batch()
    with pytest.raises(CorruptRecordError, match="claims"):
        RecordBatch(raw[:-3])


def test_record_count_larger_than_the_records_is_corrupt():
    raw = bytearray(_one_batch())
    struct.pack_into(">i", raw, 57, 5)
    with pytest.raises(CorruptRecordError, match="ends inside record"):
        RecordBatch(bytes(raw)).records()


def test_iter_batches_stops_quietly_at_a_partial_tail():
    raw = _one_batch() + _one_batch()
    assert len(list(iter_batches(raw + raw[:30]))) == 2


@pytest.mark.parametrize(
    ("magic", "codec"), [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)]
)
def test_legacy_message_sets_read_and_upconvert(magic, codec):
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(4):
        builder.append(i, 1000 + i if magic else None, b"k%d" % i if i else None, b"v%d" % i)
    raw = bytes(builder.build())
    legacy_records = list(iter_records(raw))
    assert [r.value for r in legacy_records] == [b"v0", b"v1", b"v2", b"v3"]
    upconverted = b"".join(upconvert(entry) for entry in iter_batches(raw))
    assert list(iter_records(upconverted)) == legacy_records
    for batch in iter_batches(upconverted):
        assert isinstance(batch, RecordBatch) and batch.header.compression == codec


def test_magic0_lz4_wrapper_is_refused_with_a_named_error():
    builder = LegacyRecordBatchBuilder(0, 1, 1 << 20)
    builder.append(0, None, b"k", b"v")
    raw = bytearray(builder.build())
    raw[17] = (raw[17] & ~0x07) | 3  # gzip wrapper relabelled lz4, CRC-32 recomputed
    struct.pack_into(">I", raw, 12, zlib.crc32(bytes(raw[16:])))
    with pytest.raises(UnsupportedCompressionError, match="pre-KIP-57"):
        list(iter_records(bytes(raw)))


def test_legacy_bad_crc_is_rejected():
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    builder.append(0, 1000, b"k", b"v")
    raw = bytearray(builder.build())
    raw[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32"):
        list(iter_batches(bytes(raw)))


def _one_batch() -> bytes:
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v" * 20, 1000)
    builder.append(b"k2", b"w", 1001)
    return builder.build()
