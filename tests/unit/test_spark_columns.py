"""The Spark source's Arrow columns: the C decoder's columns (records/_scan.c decode_columns)
equal what the Python decoder gives for the same batches, whatever the keys, values,
compression, timestamp type and offset bounds; the slow paths give the same; a corrupt batch
is named. No Spark needed: these are the buffers Spark is handed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.errors import CorruptRecordError
from seglog.records import RecordBatch, RecordBatchBuilder
from seglog.records.batch import stamp_log_append_time
from seglog.spark.columns import (
    FIRST_ARROW_BATCH_ROWS,
    ROWS_PER_ARROW_BATCH,
    ArrowColumns,
    ArrowRows,
    arrow_schema,
    batch_rows,
)

fields = st.one_of(st.none(), st.binary(max_size=300))
records = st.lists(st.tuples(fields, fields), min_size=1, max_size=60)


def _batch(pairs, *, base_offset=0, compression=0, headers=None, log_append_ms=None):
    # Not tests/batches.py's builder: the columns are read from a batch as a node stores it
    # (its base offset assigned, LogAppendTime stamped), each record a millisecond apart.
    builder = RecordBatchBuilder(compression=compression)
    for i, (key, value) in enumerate(pairs):
        builder.append(key, value, 1_700_000_000_000 + i, headers)
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big")
    if log_append_ms is not None:
        stamp_log_append_time(data, 0, log_append_ms)
    return RecordBatch(bytes(data))


def _expected(batches, low, high):
    out = []
    for batch in batches:
        for r in batch.records():
            if low <= r.offset < high:
                out.append((r.key, r.value, r.offset, r.timestamp_ms, r.timestamp_type))
    return out


def _got(table_batch):
    columns = table_batch.to_pydict()
    return [
        (k, v, o, int(t.timestamp()) * 1000 + t.microsecond // 1000, tt)
        for k, v, o, t, tt in zip(
            columns["key"],
            columns["value"],
            columns["offset"],
            columns["timestamp"],
            columns["timestampType"],
            strict=True,
        )
    ]


@settings(max_examples=60, deadline=None)
@given(
    first=records,
    second=records,
    compression=st.sampled_from([0, 1, 3, 4]),
    bounds=st.tuples(st.integers(0, 130), st.integers(0, 130)),
)
def test_columns_equal_the_python_decoders_records(first, second, compression, bounds):
    low, high = min(bounds), max(bounds)
    batches = [
        _batch(first, compression=compression, headers=[("h", b"x")]),
        _batch(
            second, base_offset=len(first), compression=compression, log_append_ms=1_800_000_000_123
        ),
    ]
    columns = ArrowColumns("t", 3)
    for batch in batches:
        columns.add_batch(batch, low, high)
    expected = _expected(batches, low, high)
    assert columns.rows == len(expected)
    if not expected:
        return
    out = columns.take()
    assert out.schema.equals(arrow_schema(False))
    assert _got(out) == expected
    assert set(out.column("topic").to_pylist()) == {"t"}
    assert set(out.column("partition").to_pylist()) == {3}
    assert columns.rows == 0  # taken: the next batch starts empty


def test_the_slow_path_and_the_headers_path_agree_with_the_fast_one():
    pairs = [(None, b"a"), (b"k", None), (b"k2", b"v2"), (None, None)]
    batch = _batch(pairs, base_offset=10, headers=[("n", b"1"), ("e", None)])
    fast, slow, with_headers = ArrowColumns("t", 0), ArrowColumns("t", 0), ArrowRows("t", 0)
    fast.add_batch(batch, 0, 100)
    slow.add_records(batch.records())
    with_headers.add_batch(batch, 0, 100)
    expected = _got(fast.take())
    assert _got(slow.take()) == expected
    headed = with_headers.take()
    assert headed.schema.equals(arrow_schema(True))
    assert _got(headed) == expected
    assert headed.column("headers").to_pylist()[0] == [
        {"key": "n", "value": b"1"},
        {"key": "e", "value": None},
    ]


def test_a_corrupt_records_section_is_named_and_adds_nothing():
    good = _batch([(b"k", b"v")] * 3)
    columns = ArrowColumns("t", 0)
    columns.add_batch(good, 0, 100)
    raw = bytearray(_batch([(b"k", b"value")] * 3).raw())
    assert raw[-7] == 10  # the last record's value length (zigzag 5)
    raw[-7] = 12  # 6: the value runs past its record
    corrupt = RecordBatch(bytes(raw))
    with pytest.raises(CorruptRecordError):
        columns.add_batch(corrupt, 0, 100)
    assert columns.rows == 3
    assert _got(columns.take()) == _expected([good], 0, 100)


def test_a_tasks_batches_double_from_the_first_and_halve_towards_its_end():
    # columns.py: the JVM waits on a task's first batch and the worker on its last, so both
    # are small; 10k rows in the middle.
    assert [batch_rows(n, 10**9) for n in (1000, 2000, 4000, 8000, 10_000)] == [
        1000,
        2000,
        4000,
        8000,
        10_000,
    ]
    assert [batch_rows(10_000, left) for left in (9000, 5000, 1200, 10, 0)] == [
        9000,
        5000,
        1200,
        1000,
        1000,
    ]
    columns = ArrowColumns("t", 0)
    assert columns.next_rows == FIRST_ARROW_BATCH_ROWS
    for _ in range(6):
        columns.take()
    assert columns.next_rows == ROWS_PER_ARROW_BATCH
