"""Batches are validated inside, not only their headers: records section structure, codec,
timestamps, keys on compacted topics, and bounded decompression."""

from __future__ import annotations

import struct
import time
import tracemalloc
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from seglog.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from seglog.records import RecordBatchBuilder
from seglog.records._scan import scan_input
from seglog.records.batch import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_OFFSET,
    HEADER_BYTES,
    LAST_OFFSET_DELTA_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    RECORD_COUNT_OFFSET,
    BatchHeader,
    compute_crc,
    read_header,
)
from seglog.records.compression import MAX_CODEC, CompressionType, compress, decompress
from seglog.storage import LogConfig
from seglog.storage.validation import validate_records

NOW_MS = time.time_ns() // 1_000_000


def _batch(values, keys=None, compression=0, timestamps=None) -> bytearray:
    # Not tests/batches.py's builder: these checks need a timestamp per record (skew, max
    # timestamp) and a mutable batch to corrupt in place before resealing it.
    builder = RecordBatchBuilder(compression=compression)
    for i, value in enumerate(values):
        key = None if keys is None else keys[i]
        builder.append(key, value, NOW_MS if timestamps is None else timestamps[i])
    return bytearray(builder.build())


def _reseal(raw: bytearray) -> bytes:
    """Recompute the CRC after a deliberate change, so only the inner check can catch it."""
    struct.pack_into(">I", raw, CRC_OFFSET, compute_crc(raw, 0, len(raw)))
    return bytes(raw)


def _validate(raw, **config):
    return validate_records(raw, LogConfig(**config), NOW_MS)


def test_a_header_claiming_more_records_than_the_section_holds_is_refused():
    raw = _batch([b"a", b"b", b"c"])
    struct.pack_into(">i", raw, LAST_OFFSET_DELTA_OFFSET, 2**31 - 2)
    struct.pack_into(">i", raw, RECORD_COUNT_OFFSET, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="holds 3 records, recordCount says 2147483647"):
        _validate(_reseal(raw))


def test_a_record_whose_fields_disagree_with_its_length_is_refused():
    raw = _batch([b"abc", b"def"])
    raw[HEADER_BYTES] += 2  # the first record's length varint (zigzag: +1)
    with pytest.raises(CorruptRecordError, match="record 0 at position 0"):
        _validate(_reseal(raw))


def test_trailing_garbage_after_the_last_record_is_refused():
    raw = _batch([b"abc"])
    raw += b"\x00\x00"
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    with pytest.raises(CorruptRecordError, match="more records than recordCount"):
        _validate(_reseal(raw))


def test_a_payload_that_does_not_decompress_under_its_declared_codec_is_refused():
    raw = _batch([b"x" * 100] * 5, compression=CompressionType.GZIP)
    attributes = struct.unpack_from(">h", raw, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", raw, ATTRIBUTES_OFFSET, (attributes & ~7) | CompressionType.LZ4)
    with pytest.raises(CorruptRecordError, match="lz4 records section .* does not decompress"):
        _validate(_reseal(raw))


def test_max_timestamp_must_be_the_largest_record_timestamp_and_not_below_base():
    raw = _batch([b"a", b"b"], timestamps=[NOW_MS - 5, NOW_MS])
    struct.pack_into(">q", raw, MAX_TIMESTAMP_OFFSET, NOW_MS + 1000)
    with pytest.raises(InvalidRecordError, match="not the largest record timestamp"):
        _validate(_reseal(raw))
    raw = _batch([b"a"])
    struct.pack_into(">q", raw, MAX_TIMESTAMP_OFFSET, NOW_MS - 10)
    with pytest.raises(InvalidRecordError, match="is below baseTimestamp"):
        _validate(_reseal(raw))


def test_a_record_timestamp_before_the_window_is_refused_even_when_the_header_is_inside():
    # The first record sets baseTimestamp; the second's delta is negative: base and max are
    # inside the window, the second record is two hours before it.
    raw = _batch([b"new", b"old"], timestamps=[NOW_MS + 10, NOW_MS - 7_200_000])
    assert struct.unpack_from(">q", raw, BASE_TIMESTAMP_OFFSET)[0] == NOW_MS + 10
    with pytest.raises(InvalidTimestampError, match="a record's timestamp"):
        _validate(bytes(raw), message_timestamp_before_max_ms=3_600_000)


def test_keyless_records_are_refused_on_compacted_topics_only():
    keyless = bytes(_batch([b"v1", b"v2"], keys=[b"k", None]))
    _validate(keyless)
    with pytest.raises(InvalidRecordError, match="record 1 .* null key on a compacted topic"):
        _validate(keyless, cleanup_policy="compact")
    _validate(bytes(_batch([b"v"], keys=[b"k"])), cleanup_policy="compact")


@pytest.mark.parametrize("codec", [c for c in CompressionType if c])
def test_decompression_stops_at_the_bound_for_every_codec(codec):
    zeros = bytes(4 * 1024 * 1024)
    packed = compress(codec, zeros)
    assert len(packed) < 512 * 1024
    with pytest.raises(CorruptRecordError, match="decompresses to more than 1048576 bytes"):
        decompress(codec, packed, 1024 * 1024)
    assert decompress(codec, packed, len(zeros)) == zeros


def test_a_gzip_bomb_in_a_batch_is_refused_without_inflating_it():
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = packer.compress(bytes(256 * 1024 * 1024)) + packer.flush()
    assert len(bomb) < 300 * 1024
    raw = _batch([b"seed"], compression=CompressionType.GZIP)
    raw = raw[:HEADER_BYTES] + bomb
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="decompresses to more than"):
            _validate(_reseal(raw), max_uncompressed_batch_bytes=4 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024  # the bomb is 256 MiB inflated


def test_legacy_gzip_wrappers_share_one_decompression_budget():
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 30)
    for i in range(4):
        builder.append(i, timestamp=NOW_MS, key=None, value=bytes(2 * 1024 * 1024))
    wrapper = bytes(builder.build())
    assert len(wrapper) < 64 * 1024
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        _validate(wrapper * 3, max_uncompressed_batch_bytes=12 * 1024 * 1024)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=200)),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(list(CompressionType)),
)
def test_every_well_formed_batch_passes_the_inner_checks(records, codec):
    if codec == CompressionType.SNAPPY:
        codec = CompressionType.NONE  # snappy covered by the codec test; keeps runs short
    builder = RecordBatchBuilder(compression=codec)
    for key, value in records:
        builder.append(key, value, NOW_MS)
    validated = _validate(builder.build())
    assert len(validated.batches) == 1


def test_one_c_call_checks_a_whole_input_and_stops_at_the_first_bad_batch():
    good = bytes(_batch([b"a", b"b"]))
    packed = bytes(_batch([b"c" * 50] * 3, compression=CompressionType.LZ4))
    broken = bytearray(_batch([b"d", b"e"]))
    struct.pack_into(">i", broken, RECORD_COUNT_OFFSET, 3)  # three claimed, two held
    struct.pack_into(">i", broken, LAST_OFFSET_DELTA_OFFSET, 2)
    raw = good + packed + _reseal(broken) + good
    batches, slow, stop = scan_input(
        raw, BatchHeader, 1 << 20, MAX_CODEC, True, NOW_MS - 1000, NOW_MS + 1000, False
    )
    assert [pos for pos, _ in batches] == [0, len(good)]
    assert batches[1][1] == read_header(raw, len(good))  # field for field, as Python reads it
    assert isinstance(batches[0][1], BatchHeader)
    assert slow == [1]  # compressed: its inside is checked after decompression
    assert stop == len(good) + len(packed)
    with pytest.raises(CorruptRecordError, match="holds 2 records, recordCount says 3"):
        validate_records(raw, LogConfig(), NOW_MS)
