import time

import pytest

from seglog.records import RecordBatchBuilder


@pytest.fixture
def now_ms() -> int:
    return time.time_ns() // 1_000_000


def make_batch(values, *, keys=None, timestamp_ms=None, compression=0, headers=None) -> bytes:
    builder = RecordBatchBuilder(compression=compression)
    keys = keys if keys is not None else [None] * len(values)
    ts = timestamp_ms if timestamp_ms is not None else time.time_ns() // 1_000_000
    for key, value in zip(keys, values, strict=True):
        builder.append(key, value, ts, headers)
    return builder.build()
