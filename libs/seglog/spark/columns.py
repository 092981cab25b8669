"""Records gathered into Arrow record batches of the source's schema (Spark's Kafka source
columns), the form Spark's Python Data Source API takes fastest.

`ArrowColumns`, the default, has the C decoder write each batch's records straight into
Arrow's buffers (records/_scan.c `decode_columns`: int64 offsets and microsecond
timestamps, int32
value offsets, data, validity bitmaps), so a record costs no Python object at all; a batch
the C decoder will not take goes through the Python decoder, which names what is wrong.
`ArrowRows` (with `includeHeaders`) builds the columns from decoded records in whole-list
passes, headers included.
"""

from __future__ import annotations

import itertools
import struct
from typing import Protocol

import pyarrow as pa

from ..records import HEADER_BYTES, Record
from ..records._scan import decode_columns
from ..records.batch import RecordBatch
from ..records.compression import CompressionType
from ..records.record import LOG_APPEND_TIME

ROWS_PER_ARROW_BATCH = 10_000  # SPARK.md: ~10k rows per batch is the API's best
# A task's first batch, and its last ones, are smaller. The worker and Spark's JVM are a
# pipeline over a task's batches: the JVM waits for the first batch to be built, then the
# worker waits for the JVM to take in the last one, and a task's start waits for that. At
# 10k rows each wait was ~25 ms a task (measured on the bench, 1000-byte rows), as long as
# a 16 MiB store task's whole read. So the batches double from FIRST_ARROW_BATCH_ROWS up,
# and one leaves as soon as it holds as many rows as the task has still to read (halving
# towards its end); a batch costs the JVM ~1 ms whatever its size, so not smaller.
FIRST_ARROW_BATCH_ROWS = 1_000
DATA_BYTES_PER_ARROW_BATCH = 64 * 1024 * 1024  # and big records end a batch sooner

HEADER_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the source's Spark schema, as Spark checks it (every field
    nullable, microsecond UTC timestamps, 32-bit ints)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


class Collector(Protocol):
    @property
    def rows(self) -> int: ...

    def add_batch(self, batch: RecordBatch, min_offset: int, end_offset: int) -> None: ...

    def add_records(self, records: list[Record]) -> None: ...

    def full(self, remaining: int) -> bool: ...

    def take(self) -> pa.RecordBatch: ...


_INT32_ZERO = struct.pack("=i", 0)
_US = pa.timestamp("us", tz="UTC")


# decode_columns' layout: offsets, timestamps (us), key offsets, key data, key validity,
# value offsets, value data, value validity; offsets columns start with their leading 0.
_FIRST_USED = [0, 0, 4, 0, 0, 4, 0, 0]
_DATA_COLUMNS = (3, 6)


def batch_rows(next_rows: int, remaining: int) -> int:
    """The rows that fill a batch: `next_rows` (the task's batches doubling), or fewer when
    only `remaining` (offsets) are left to read, never below FIRST_ARROW_BATCH_ROWS."""
    return min(next_rows, max(FIRST_ARROW_BATCH_ROWS, remaining))


class ArrowColumns:
    def __init__(self, topic: str, partition: int) -> None:
        self.schema = arrow_schema(False)
        self.topic = topic
        self.partition = partition
        self.next_rows = FIRST_ARROW_BATCH_ROWS
        self._reset()

    def _reset(self) -> None:
        self.columns = [bytearray(4096) for _ in _FIRST_USED]
        self.used = list(_FIRST_USED)
        self.rows = 0
        self._types: list[tuple[int, int]] = []  # (rows, timestampType) runs

    def add_batch(self, batch: RecordBatch, min_offset: int, end_offset: int) -> None:
        header = batch.header
        log_append_time = header.timestamp_type == LOG_APPEND_TIME
        stamp = header.max_timestamp if log_append_time else -1
        used = list(self.used)
        try:
            if log_append_time and stamp < 0:
                raise ValueError("a stamp of -1 is the Python decoder's to apply")
            # Uncompressed records are read where they lie (no copy of the section).
            section = (
                batch.raw()[HEADER_BYTES:]
                if header.compression == CompressionType.NONE
                else batch.records_section()
            )
            added = decode_columns(
                section,
                header.base_offset,
                header.base_timestamp,
                header.record_count,
                header.last_offset_delta,
                stamp,
                min_offset,
                end_offset,
                self.columns,
                self.used,
            )
        except ValueError:
            self.used = used  # whatever the C decoder wrote before it gave up is spare room
            records = batch.records()  # raises CorruptRecordError naming the problem
            self.add_records([r for r in records if min_offset <= r.offset < end_offset])
            return
        self._count(added, 1 if log_append_time else 0)

    def add_records(self, records: list[Record]) -> None:
        """The slow path (legacy entries, what the C decoder declined): one record at a
        time into the same buffers."""
        for record in records:
            row = self.rows
            self._put(0, struct.pack("=q", record.offset))
            self._put(1, struct.pack("=q", record.timestamp_ms * 1000))
            for ends, data, validity, field in ((2, 3, 4, record.key), (5, 6, 7, record.value)):
                bits = self.columns[validity]
                if row & 7 == 0:
                    self._put(validity, b"\0")
                if field is None:
                    bits[row >> 3] &= ~(1 << (row & 7))
                else:
                    bits[row >> 3] |= 1 << (row & 7)
                    self._put(data, field)
                self._put(ends, struct.pack("=i", self.used[data]))
            self._count(1, record.timestamp_type)

    def _put(self, index: int, data: bytes) -> None:
        column, start = self.columns[index], self.used[index]
        end = start + len(data)
        if end > len(column):
            column.extend(bytes(max(end - len(column), len(column))))
        column[start:end] = data
        self.used[index] = end

    def _count(self, added: int, timestamp_type: int) -> None:
        if not added:
            return
        self.rows += added
        if self._types and self._types[-1][1] == timestamp_type:
            self._types[-1] = (self._types[-1][0] + added, timestamp_type)
        else:
            self._types.append((added, timestamp_type))

    def full(self, remaining: int) -> bool:
        return (
            self.rows >= batch_rows(self.next_rows, remaining)
            or sum(self.used[i] for i in _DATA_COLUMNS) >= DATA_BYTES_PER_ARROW_BATCH
        )

    def take(self) -> pa.RecordBatch:
        count = self.rows
        offsets, timestamps, key_offsets, keys, key_valid, value_offsets, values, value_valid = (
            pa.py_buffer(column)[:used]
            for column, used in zip(self.columns, self.used, strict=True)
        )
        types = self._types
        self._reset()  # Arrow keeps the old buffers: new ones from here on
        self.next_rows = min(2 * self.next_rows, ROWS_PER_ARROW_BATCH)
        if len(types) == 1:
            type_column = pa.repeat(pa.scalar(types[0][1], pa.int32()), count)
        else:
            type_column = pa.array([t for n, t in types for _ in range(n)], pa.int32())
        arrays = [
            pa.Array.from_buffers(pa.binary(), count, [key_valid, key_offsets, keys]),
            pa.Array.from_buffers(pa.binary(), count, [value_valid, value_offsets, values]),
            pa.repeat(pa.scalar(self.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.partition, pa.int32()), count),
            pa.Array.from_buffers(pa.int64(), count, [None, offsets]),
            pa.Array.from_buffers(_US, count, [None, timestamps]),
            type_column,
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


class ArrowRows:
    """With headers: the columns from decoded records, a few whole-list passes per batch."""

    def __init__(self, topic: str, partition: int) -> None:
        self.schema = arrow_schema(True)
        self.topic = topic
        self.partition = partition
        self._records: list[Record] = []
        self.next_rows = FIRST_ARROW_BATCH_ROWS

    @property
    def rows(self) -> int:
        return len(self._records)

    def add_batch(self, batch: RecordBatch, min_offset: int, end_offset: int) -> None:
        decoded = batch.records(self.topic, self.partition)
        if decoded and (decoded[0].offset < min_offset or decoded[-1].offset >= end_offset):
            decoded = [r for r in decoded if min_offset <= r.offset < end_offset]
        self._records += decoded

    def add_records(self, records: list[Record]) -> None:
        self._records += [r._replace(topic=self.topic, partition=self.partition) for r in records]

    def full(self, remaining: int) -> bool:
        return len(self._records) >= batch_rows(self.next_rows, remaining)

    def take(self) -> pa.RecordBatch:
        records, self._records = self._records, []
        self.next_rows = min(2 * self.next_rows, ROWS_PER_ARROW_BATCH)
        count = len(records)
        offsets, timestamps, keys, values, headers, _, _, types = zip(*records, strict=True)
        arrays = [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.partition, pa.int32()), count),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
            pa.array(types, pa.int32()),
        ]
        arrays.append(_headers_array(headers))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _headers_array(headers: tuple[tuple[tuple[str, bytes | None], ...], ...]) -> pa.Array:
    flat = [pair for h in headers for pair in h]
    starts = [0, *itertools.accumulate(map(len, headers))]  # the list offsets Arrow needs
    keys, values = zip(*flat, strict=True) if flat else ((), ())
    items = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
        fields=list(HEADER_TYPE.value_type),
    )
    return pa.ListArray.from_arrays(pa.array(starts, pa.int32()), items, type=HEADER_TYPE)
