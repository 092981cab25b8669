"""What is checked inside a v2 batch before it is accepted, beyond its header and CRC: pure
functions of the batch's bytes and limits passed in (no config object), so the gateway and
the storage node apply the same rules.

Inside (as Kafka's LogValidator): the records section decompresses under the declared codec
to at most `max_uncompressed_bytes`; it holds exactly recordCount records whose lengths,
varints and fields agree (`_scan.scan_records`, in C: no Python work per record);
offset deltas are 0, 1, 2, ...; on a compacted topic every record has a key (Kafka's
INVALID_RECORD); and the header's timestamps agree with the records': maxTimestamp is not
below baseTimestamp and equals the largest record timestamp (CreateTime batches).
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import CorruptRecordError, InvalidRecordError
from ._scan import scan_records
from .batch import COMPRESSION_MASK, CONTROL_MASK, HEADER_BYTES, TIMESTAMP_TYPE_MASK, BatchHeader
from .compression import decompress


class RecordTimestamps(NamedTuple):
    """The smallest and largest record timestamp of a batch."""

    min_ms: int
    max_ms: int


def check_records(
    view: memoryview,
    position: int,
    header: BatchHeader,
    *,
    require_keys: bool,
    max_uncompressed_bytes: int,
    check_max_timestamp: bool = True,
) -> RecordTimestamps:
    """Check the records of the batch at `position`; raise InvalidRecordError or
    CorruptRecordError naming the batch and what is wrong."""
    if header.max_timestamp < header.base_timestamp:
        raise InvalidRecordError(
            f"batch at position {position}: maxTimestamp {header.max_timestamp} is below "
            f"baseTimestamp {header.base_timestamp}"
        )
    section: bytes | memoryview = view[position + HEADER_BYTES : position + header.size_in_bytes]
    codec = header.attributes & COMPRESSION_MASK
    if codec:
        try:
            section = decompress(codec, section, max_uncompressed_bytes)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"batch at position {position}: {exc}") from None
    control = bool(header.attributes & CONTROL_MASK)
    try:
        low, high = scan_records(section, header.record_count, require_keys and not control)
    except ValueError as exc:
        error = InvalidRecordError if "null key" in str(exc) else CorruptRecordError
        raise error(f"batch at position {position}: {exc}") from None
    timestamps = RecordTimestamps(header.base_timestamp + low, header.base_timestamp + high)
    log_append_time = header.attributes & TIMESTAMP_TYPE_MASK
    if (
        check_max_timestamp
        and not control
        and not log_append_time
        and timestamps.max_ms != header.max_timestamp
    ):
        raise InvalidRecordError(
            f"batch at position {position}: maxTimestamp {header.max_timestamp} is not the "
            f"largest record timestamp {timestamps.max_ms}"
        )
    return timestamps
