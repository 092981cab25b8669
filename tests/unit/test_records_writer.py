"""The C records writer and partitioner (records/_encode.c) against their Python references
and kafka-python: the same bytes for the same records, the same partition for the same key."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafka.record.default_records import DefaultRecordBatchBuilder

from seglog.client import partitioner
from seglog.errors import InvalidRecordError
from seglog.records import RecordBatchBuilder, iter_records, records_writer
from seglog.records._encode import RecordsWriter
from seglog.records.records_writer import PyRecordsWriter

BASE_MS = 1_700_000_000_000

_FIELD = st.one_of(
    st.none(),
    st.binary(max_size=300),
    st.integers(min_value=16_000, max_value=20_000).map(lambda n: b"b" * n),  # long varints
)
_HEADERS = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=10
    ),
)
_TIMESTAMP_DELTA = st.one_of(
    st.integers(min_value=-100, max_value=100),
    st.integers(min_value=-(10**10), max_value=10**10),
    st.integers(min_value=-(2**62), max_value=2**62),
)
_RECORDS = st.lists(st.tuples(_FIELD, _FIELD, _TIMESTAMP_DELTA, _HEADERS), min_size=1, max_size=30)


def test_the_producer_path_takes_the_c_writer_and_partitioner_once_built():
    # The Python ones are the fallback where the C module is missing; here it is built.
    assert records_writer.RecordsWriter is RecordsWriter
    assert partitioner.KeyPartitioner is partitioner.CKeyPartitioner


def _build(writer, records, max_bytes):
    builder = RecordBatchBuilder(writer=writer, max_bytes=max_bytes)
    counts = [
        builder.append(key, value, BASE_MS + delta, headers)
        for key, value, delta, headers in records
    ]
    return counts, builder.build()


@settings(max_examples=100, deadline=None)
@given(_RECORDS, st.integers(min_value=61, max_value=40_000))
def test_c_writer_builds_the_python_writers_bytes_and_refuses_the_same_records(records, max_bytes):
    c_counts, c_batch = _build(RecordsWriter, records, max_bytes)
    py_counts, py_batch = _build(PyRecordsWriter, records, max_bytes)
    assert c_counts == py_counts
    assert c_batch == py_batch


@settings(max_examples=80, deadline=None)
@given(_RECORDS)
def test_c_writer_builds_the_bytes_kafka_python_builds(records):
    _, built = _build(RecordsWriter, records, 1 << 30)
    theirs = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i, (key, value, delta, headers) in enumerate(records):
        theirs.append(i, BASE_MS + delta, key, value, headers or [])
    expected = bytes(theirs.build())
    # Byte for byte but partitionLeaderEpoch (outside the CRC): kafka-python writes 0 there.
    assert built[:12] + built[16:] == expected[:12] + expected[16:]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(_FIELD, _FIELD), min_size=1, max_size=40),
    st.integers(min_value=61, max_value=20_000),
    st.integers(min_value=0, max_value=3),
)
def test_append_many_and_append_value_agree_between_c_and_python(pairs, max_bytes, first):
    keys = [key for key, _ in pairs]
    values = [value for _, value in pairs]
    batches = []
    for writer in (RecordsWriter, PyRecordsWriter):
        builder = RecordBatchBuilder(writer=writer, max_bytes=max_bytes)
        for i in range(first):  # records already in the batch, at an earlier timestamp
            builder.append_value(b"v" * i, BASE_MS - 5)
        taken = builder.append_many(values, keys, timestamp_ms=BASE_MS)
        batches.append((taken, builder.record_count, builder.build()))
    assert batches[0] == batches[1]


def test_a_bad_header_key_is_refused_by_both_and_adds_nothing():
    for writer in (RecordsWriter, PyRecordsWriter):
        builder = RecordBatchBuilder(writer=writer)
        assert builder.append(b"k", b"v", BASE_MS) == 1
        size = builder.size_in_bytes
        with pytest.raises(InvalidRecordError, match="header key must be str, got int"):
            builder.append(b"k", b"v", BASE_MS, [("ok", b"1"), (7, b"2")])
        assert (builder.record_count, builder.size_in_bytes) == (1, size)


def test_a_bad_record_in_append_many_leaves_the_batch_as_it_was():
    builder = RecordBatchBuilder()
    builder.append_value(b"first", BASE_MS)
    before = (builder.record_count, builder.size_in_bytes)
    with pytest.raises(TypeError):
        builder.append_many([b"a", b"b", 42, b"c"], timestamp_ms=BASE_MS + 1)  # type: ignore[list-item]
    assert (builder.record_count, builder.size_in_bytes) == before
    assert [r.value for r in iter_records(builder.build())] == [b"first"]


def test_the_c_writer_takes_any_bytes_like_key_and_value_and_copies_it_at_once():
    value = bytearray(b"mutable")
    builder = RecordBatchBuilder()
    builder.append(memoryview(b"key"), value, BASE_MS, [("h", bytearray(b"x"))])
    value[:] = b"changed"
    [record] = iter_records(builder.build())
    assert (record.key, record.value, record.headers) == (b"key", b"mutable", (("h", b"x"),))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_c_partitioner_matches_python_and_kafka_python(key, partitions):
    assert partitioner.murmur2(key) == partitioner.py_murmur2(key)
    assert partitioner.murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    assert partitioner.partition_for_key(key, partitions) == expected
    assert partitioner.py_partition_for_key(key, partitions) == expected
    assert partitioner.KeyPartitioner().partition(key, partitions) == expected
    assert partitioner.PyKeyPartitioner(max_keys=4).partition(key, partitions) == expected


def test_c_partitioner_refuses_no_partitions_as_python_does():
    for partition_for_key in (partitioner.partition_for_key, partitioner.py_partition_for_key):
        with pytest.raises(ValueError, match="num_partitions must be >= 1, got 0"):
            partition_for_key(b"key", 0)
