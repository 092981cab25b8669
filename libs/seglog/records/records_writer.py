"""The records section of one RecordBatch v2 being built: the producer's per-record hot path.

Two implementations of one interface (`RecordsWriter`): the C one (`_encode.c`, built with
the package as `seglog.records._encode`) and `PyRecordsWriter` here, the reference the tests
compare it with byte for byte and the fallback where the C module is not built. Record
layout: _encode.c's header comment.

The Python writer does no per-field function calls: each varint of an ordinary record (small
deltas and lengths) is one index into a table of precomputed encodings, and each record is
appended to one list of parts in a few extends, joined once by `section()`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from ..errors import InvalidRecordError
from .varint import VARINT_TABLE, VARINT_TABLE_OFFSET, encode_varint

__all__ = ["Headers", "PyRecordsWriter", "RecordsWriter", "RecordsWriterType", "encode_headers"]

Headers = Sequence[tuple[str, bytes | None]]

_TABLE_LOW = -VARINT_TABLE_OFFSET
_TABLE_HIGH = len(VARINT_TABLE) - VARINT_TABLE_OFFSET
_NULL = encode_varint(-1)
_NO_HEADERS = encode_varint(0)
_RECORD_ATTRIBUTES = b"\x00"
# Two fields that always sit side by side, looked up as one part: attributes (always 0) with
# the timestamp delta, and a null key's length with the value's length.
_ATTRIBUTES_AND_TS_DELTA = [_RECORD_ATTRIBUTES + v for v in VARINT_TABLE]
_NULL_KEY_AND_LENGTH = [_NULL + VARINT_TABLE[n + VARINT_TABLE_OFFSET] for n in range(_TABLE_HIGH)]


def encode_headers(headers: Headers) -> bytes:
    out = bytearray(encode_varint(len(headers)))
    for key, value in headers:
        if not isinstance(key, str):
            raise InvalidRecordError(f"header key must be str, got {type(key).__name__}")
        raw_key = key.encode("utf-8")
        out += encode_varint(len(raw_key))
        out += raw_key
        if value is None:
            out += _NULL
        else:
            out += encode_varint(len(value))
            out += value
    return bytes(out)


class RecordsWriterType(Protocol):
    """What the batch builder needs of a records writer (both implementations)."""

    @property
    def record_count(self) -> int: ...
    @property
    def records_bytes(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def max_records_bytes(self) -> int: ...
    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> int: ...
    def append_value(self, value: bytes, timestamp_ms: int) -> int: ...
    def append_many(
        self,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> int: ...
    def section(self) -> bytes: ...


class PyRecordsWriter:
    """The records section in Python: `append` returns the record count, or 0 (nothing
    added) when the record would take the section past `max_records_bytes` (the first
    record is always taken)."""

    __slots__ = (
        "_parts",
        "_records_bytes",
        "max_records_bytes",
        "_base_timestamp",
        "_max_timestamp",
        "_count",
        "_sealed",
    )

    def __init__(self, max_records_bytes: int) -> None:
        self.max_records_bytes = max_records_bytes
        # Records are kept as a list of byte strings joined once by section(): one list
        # extend per record is the cheapest append CPython offers (measured ~2x a bytearray).
        self._parts: list[bytes] = []
        self._records_bytes = 0
        self._base_timestamp = 0
        self._max_timestamp = 0
        self._count = 0
        self._sealed = False  # section() was taken: no more records

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def records_bytes(self) -> int:
        return self._records_bytes

    @property
    def base_timestamp(self) -> int:
        return self._base_timestamp

    @property
    def max_timestamp(self) -> int:
        return self._max_timestamp

    def section(self) -> bytes:
        """The records' bytes, once: the section is sealed (later appends add nothing and
        return 0), as the producer closes a batch while `send` may still reach it."""
        if self._sealed:
            raise RuntimeError("the records section was already taken")
        self._sealed = True
        out = b"".join(self._parts)
        self._parts = []
        return out

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> int:
        """Add one record; returns the record count, or 0 (and nothing added) when the record
        does not fit in `max_bytes` — so its truth is whether the record was added."""
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        if key is None and not headers and value is not None:
            return self.append_value(value, timestamp_ms)
        return self._append_record(key, value, timestamp_ms, headers)

    def append_value(self, value: bytes, timestamp_ms: int) -> int:
        """`append(None, value, timestamp_ms)`: the common record, with no key and no headers,
        on a path of its own (the producer's per-record hot path). Every varint of an ordinary
        record comes from a table, with attributes and the null key folded into their
        neighbours' parts; anything outside the tables takes `append`'s general path."""
        count = self._count
        if self._sealed:
            return 0
        ts_delta = timestamp_ms - self._base_timestamp if count else 0
        n = len(value)
        if not (_TABLE_LOW <= ts_delta < _TABLE_HIGH and n < _TABLE_HIGH and count < _TABLE_HIGH):
            return self._append_record(None, value, timestamp_ms, None)
        offset = VARINT_TABLE_OFFSET
        head = _ATTRIBUTES_AND_TS_DELTA[ts_delta + offset]
        offset_part = VARINT_TABLE[count + offset]
        value_part = _NULL_KEY_AND_LENGTH[n]
        # + 1: the header count, always the one byte of _NO_HEADERS here.
        size = len(head) + len(offset_part) + len(value_part) + n + 1
        if size >= _TABLE_HIGH:
            return self._append_record(None, value, timestamp_ms, None)
        length_part = VARINT_TABLE[size + offset]
        records_bytes = self._records_bytes + len(length_part) + size
        if count and records_bytes > self.max_records_bytes:
            return 0
        self._parts += (length_part, head, offset_part, value_part, value, _NO_HEADERS)
        # _booked, inlined: a call less per record.
        self._records_bytes = records_bytes
        if count == 0:
            self._base_timestamp = self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        count += 1
        self._count = count
        return count

    def _append_record(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers | None,
    ) -> int:
        """Any record: a key, headers, a null value, or fields beyond the varint tables."""
        count = self._count
        if self._sealed:
            return 0
        ts_delta = timestamp_ms - self._base_timestamp if count else 0
        table = VARINT_TABLE
        table_offset = VARINT_TABLE_OFFSET
        high = _TABLE_HIGH
        head = (
            _ATTRIBUTES_AND_TS_DELTA[ts_delta + table_offset]
            if _TABLE_LOW <= ts_delta < high
            else _RECORD_ATTRIBUTES + encode_varint(ts_delta)
        )
        offset_part = table[count + table_offset] if count < high else encode_varint(count)
        headers_part = encode_headers(headers) if headers else _NO_HEADERS
        if value is None:
            value_part, value = _NULL, b""
        else:
            n = len(value)
            value_part = table[n + table_offset] if n < high else encode_varint(n)
        if key is None:
            key_part, key = _NULL, b""
        else:
            n = len(key)
            key_part = table[n + table_offset] if n < high else encode_varint(n)
        size = (
            len(head)
            + len(offset_part)
            + len(key_part)
            + len(key)
            + len(value_part)
            + len(value)
            + len(headers_part)
        )
        length_part = table[size + table_offset] if size < high else encode_varint(size)
        records_bytes = self._records_bytes + len(length_part) + size
        if count and records_bytes > self.max_records_bytes:
            return 0
        self._parts += (
            length_part,
            head,
            offset_part,
            key_part,
            key,
            value_part,
            value,
            headers_part,
        )
        return self._booked(count, records_bytes, timestamp_ms)

    def _booked(self, count: int, records_bytes: int, timestamp_ms: int) -> int:
        """Account for record number `count`, just added; returns the new record count."""
        self._records_bytes = records_bytes
        if count == 0:
            self._base_timestamp = self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        count += 1
        self._count = count
        return count

    def append_many(
        self,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """Append records sharing one timestamp and no headers; returns how many fitted.

        The bulk path for callers holding many records: one call, no per-record method
        dispatch. Stops at the first record that does not fit.
        """
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        if self._sealed:
            return 0
        table = VARINT_TABLE
        table_offset = VARINT_TABLE_OFFSET
        high = _TABLE_HIGH
        count = self._count
        base_timestamp = timestamp_ms if count == 0 else self._base_timestamp
        head = _RECORD_ATTRIBUTES + encode_varint(timestamp_ms - base_timestamp)
        # attributes + timestampDelta + header count
        fixed_bytes = len(head) + 1
        room = self.max_records_bytes - self._records_bytes
        parts: list[bytes] = []
        extend = parts.extend
        key_iter = iter(keys) if keys is not None else None
        start = count
        for value in values:
            key = next(key_iter) if key_iter is not None else None
            if key is None:
                key_part, key = _NULL, b""
            else:
                n = len(key)
                key_part = table[n + table_offset] if n < high else encode_varint(n)
            if value is None:
                value_part, value = _NULL, b""
            else:
                n = len(value)
                value_part = table[n + table_offset] if n < high else encode_varint(n)
            offset_part = table[count + table_offset] if count < high else encode_varint(count)
            size = (
                fixed_bytes
                + len(offset_part)
                + len(key_part)
                + len(key)
                + len(value_part)
                + len(value)
            )
            length_part = table[size + table_offset] if size < high else encode_varint(size)
            size += len(length_part)
            if size > room and count:
                break
            room -= size
            extend((length_part, head, offset_part, key_part, key, value_part, value, _NO_HEADERS))
            count += 1
        if count > start:
            self._parts += parts
            self._records_bytes = self.max_records_bytes - room
            self._base_timestamp = base_timestamp
            if start == 0 or timestamp_ms > self._max_timestamp:
                self._max_timestamp = timestamp_ms
            self._count = count
        return count - start


try:
    from ._encode import RecordsWriter

    C_WRITER = True
except ImportError:  # the C module is not built: the Python reference does the work
    RecordsWriter = PyRecordsWriter  # type: ignore[misc,assignment]
    C_WRITER = False
