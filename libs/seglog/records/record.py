"""One record of a v2 batch: the `Record` tuple, and the decoder of a batch's records
section (the batch around it is in batch.py).

Layout of one record in a batch's records section:

    length          varint   bytes after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - baseTimestamp
    offsetDelta     varint   offset - baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers         [keyLength varint, key UTF-8, valueLength varint (-1 null), value]
"""

from __future__ import annotations

from typing import NamedTuple, NoReturn, Protocol

from ..errors import CorruptRecordError
from ._scan import decode_section
from .varint import ONE_BYTE_VALUES, decode_varint

# Timestamp types (bit 3 of the batch attributes).
CREATE_TIME = 0
LOG_APPEND_TIME = 1


class Record(NamedTuple):
    """One decoded record. `headers` is a tuple of (str key, bytes-or-None value).

    The consumer's records are these too: `topic`, `partition` and `timestamp_type`
    (CREATE_TIME or LOG_APPEND_TIME) are filled in when the decoder is told them, so a
    fetched record costs one tuple, not a record plus a wrapper.
    """

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    topic: str = ""
    partition: int = -1
    timestamp_type: int = CREATE_TIME


class RecordsHeader(Protocol):
    """The fields of a batch header that decoding its records section reads (batch.py's
    BatchHeader has them): named here so that this module needs nothing from batch.py, which
    builds on it."""

    @property
    def base_offset(self) -> int: ...
    @property
    def base_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def record_count(self) -> int: ...
    @property
    def timestamp_type(self) -> int: ...


def decode_records(
    data: bytes, header: RecordsHeader, position: int = 0, topic: str = "", partition: int = -1
) -> list[Record]:
    """Decode a records section. One tight loop: this is the consumer's hot path.

    Varints of one and two bytes (every length below 8192) are decoded inline; only longer
    ones pay for a call.

    Checks: every record's fields end where its length says (a length that is negative or
    runs past the section fails that check, or ends the section inside a record); offset
    deltas strictly increase and stay within lastOffsetDelta (compaction leaves gaps, so they
    need not be contiguous); the count of decoded records equals recordCount; no bytes are
    left over.
    """
    log_append_time = header.timestamp_type == LOG_APPEND_TIME
    try:
        if log_append_time and header.max_timestamp < 0:
            raise ValueError("a stamp of -1 is the Python loop's to apply")
        # The C decoder (records/_scan.c) builds the same records without Python work per
        # field; on any problem it gives up and the loop below names it.
        return decode_section(
            data,
            Record,
            header.base_offset,
            header.base_timestamp,
            header.record_count,
            header.last_offset_delta,
            topic,
            partition,
            LOG_APPEND_TIME if log_append_time else CREATE_TIME,
            header.max_timestamp if log_append_time else -1,
        )
    except ValueError:
        pass
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    count = header.record_count
    last_delta = header.last_offset_delta
    one = ONE_BYTE_VALUES
    end = len(data)
    out: list[Record] = []
    append = out.append
    new = tuple.__new__
    pos = 0
    prev_delta = -1
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = one[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                length, pos = decode_varint(data, pos)
            record_end = pos + length  # checked with the fields' end below
            b = data[pos + 1]  # after the record attributes byte, unused
            if b < 0x80:
                ts_delta = one[b]
                pos += 2
            elif data[pos + 2] < 0x80:
                u = (b & 0x7F) | (data[pos + 2] << 7)
                ts_delta = (u >> 1) ^ -(u & 1)
                pos += 3
            else:
                ts_delta, pos = decode_varint(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                offset_delta = one[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                offset_delta, pos = decode_varint(data, pos)
            b = data[pos]
            if b < 0x80:
                n = one[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                n = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                n, pos = decode_varint(data, pos)
            if n < 0:
                key = None
            else:
                key = data[pos : pos + n]
                pos += n
            b = data[pos]
            if b < 0x80:
                n = one[b]
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                n = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                n, pos = decode_varint(data, pos)
            if n < 0:
                value = None
            else:
                value = data[pos : pos + n]
                pos += n
            if data[pos] == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos)
            # One branch for the three per-record checks; the error path sorts them out.
            if pos != record_end or offset_delta <= prev_delta or offset_delta > last_delta:
                _raise_record_error(length, pos - record_end, offset_delta, prev_delta, last_delta)
            prev_delta = offset_delta
            append(
                new(
                    Record,
                    (
                        base_offset + offset_delta,
                        base_ts + ts_delta,
                        key,
                        value,
                        headers,
                        topic,
                        partition,
                        CREATE_TIME,
                    ),
                )
            )
    except IndexError:
        raise CorruptRecordError(
            f"batch at position {position}: records section ends inside record "
            f"{len(out)} of {count}"
        ) from None
    if pos != end:
        raise CorruptRecordError(
            f"batch at position {position}: {end - pos} bytes left after its {count} records"
        )
    if log_append_time:
        # Every record of a LogAppendTime batch carries the batch's maxTimestamp.
        stamp = header.max_timestamp
        out = [r._replace(timestamp_ms=stamp, timestamp_type=LOG_APPEND_TIME) for r in out]
    return out


def _raise_record_error(
    length: int, overrun: int, offset_delta: int, prev_delta: int, last_delta: int
) -> NoReturn:
    if overrun:
        raise CorruptRecordError(
            f"record at offset delta {offset_delta} declares {length} bytes but its "
            f"fields take {length + overrun}"
        )
    raise CorruptRecordError(
        f"record offset delta {offset_delta} after {prev_delta} in a batch whose "
        f"lastOffsetDelta is {last_delta}"
    )


def _decode_headers(data: bytes, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = decode_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        n, pos = decode_varint(data, pos)
        if n < 0:
            raise CorruptRecordError(f"header key with negative length {n}")
        try:
            key = data[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
        pos += n
        n, pos = decode_varint(data, pos)
        if n < 0:
            value = None
        else:
            value = data[pos : pos + n]
            pos += n
        headers.append((key, value))
    return tuple(headers), pos
