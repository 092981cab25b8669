"""The record batches tests append and produce: RecordBatch v2 bytes from values (and keys,
headers, a compression codec), all records at one timestamp, offsets from 0, as a producer
builds them. A test that needs something else (per-record timestamps, a rewritten base
offset, a batch it corrupts in place) builds it next to the test that needs it."""

from __future__ import annotations

import time

from seglog.records import RecordBatchBuilder


def make_batch(values, *, keys=None, timestamp_ms=None, compression=0, headers=None) -> bytes:
    """`keys` (one per value, default none), `timestamp_ms` (default now, wall clock),
    `headers` (the same on every record)."""
    builder = RecordBatchBuilder(compression=compression)
    keys = keys if keys is not None else [None] * len(values)
    ts = timestamp_ms if timestamp_ms is not None else time.time_ns() // 1_000_000
    for key, value in zip(keys, values, strict=True):
        builder.append(key, value, ts, headers)
    return builder.build()
