"""Kafka's record formats: RecordBatch v2 (build, read, validate), legacy v0/v1 (read,
up-convert), and the five compression codecs.

Builder: `RecordBatchBuilder(compression=..., max_bytes=...)`, `.append(key, value,
timestamp_ms, headers)` (the record count, 0 when the record does not fit),
`.append_many(values, keys)`, `.build() -> bytes`.
Reader: `iter_batches(buffer)` yields `RecordBatch` (headers only; `.records()` decodes) or
legacy entries; `iter_records(buffer)` yields every `Record`.
"""

from .batch import HEADER_BYTES, BatchHeader, RecordBatch, read_header
from .builder import RecordBatchBuilder, build_batch
from .compression import CompressionType
from .legacy import LegacyMessage, upconvert
from .reader import iter_batches, iter_records
from .record import CREATE_TIME, LOG_APPEND_TIME, Record

__all__ = [
    "CREATE_TIME",
    "HEADER_BYTES",
    "LOG_APPEND_TIME",
    "BatchHeader",
    "CompressionType",
    "LegacyMessage",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "build_batch",
    "iter_batches",
    "iter_records",
    "read_header",
    "upconvert",
]
