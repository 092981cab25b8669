"""What is checked in a batch before it is accepted: pure functions of the batch's bytes and
limits passed in (no config object), so the gateway and the storage node apply the same
rules. The storage node's append path (storage/validation.py) runs the header checks inlined
in one loop and calls these to name what failed; a relay that does not know the node's
configs (the gateway) calls `check_relayed_records`, which checks only what no config changes.

Header (`check_batch`): magic, batchLength against the header and the input, the size limit,
recordCount against lastOffsetDelta, a known codec, the CRC-32C.

Inside (as Kafka's LogValidator): the records section decompresses under the declared codec
to at most `max_uncompressed_bytes`, within the process's budget for inflating batches
(inflation_budget.py); it holds exactly recordCount records whose lengths,
varints and fields agree (`_scan.scan_records`, in C: no Python work per record);
offset deltas are 0, 1, 2, ...; on a compacted topic every record has a key (Kafka's
INVALID_RECORD); and the header's timestamps agree with the records': maxTimestamp is not
below baseTimestamp and equals the largest record timestamp (CreateTime batches).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from ._scan import scan_records
from .batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_BYTES,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    check_crc,
    check_header,
    read_header,
)
from .compression import decompress_into_budget
from .inflation_budget import PROCESS_BUDGET
from .legacy import read_message


def check_batch(
    view: memoryview, position: int, header: BatchHeader, *, max_batch_bytes: int | None
) -> None:
    """The header-level checks of the v2 batch at `position`; raise the error naming the
    first that fails. `max_batch_bytes` None: no size limit (a relay's view)."""
    check_header(header, position)
    size = header.size_in_bytes
    if position + size > len(view):
        raise CorruptRecordError(
            f"batch at position {position} declares {size} bytes but the input has "
            f"{len(view) - position} left"
        )
    if max_batch_bytes is not None and size > max_batch_bytes:
        raise RecordTooLargeError(
            f"batch at position {position} is {size} bytes, larger than max.message.bytes "
            f"{max_batch_bytes}"
        )
    if header.record_count == 0 or header.record_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"batch at position {position}: recordCount {header.record_count} does not match "
            f"lastOffsetDelta {header.last_offset_delta} (expected count = delta + 1)"
        )
    check_crc(view, position, header)


def check_timestamp_window(
    position: int, header: BatchHeader, earliest_ms: int, latest_ms: int
) -> None:
    """A CreateTime batch's base and max timestamps inside [earliest, latest]."""
    for name, ts in (
        ("baseTimestamp", header.base_timestamp),
        ("maxTimestamp", header.max_timestamp),
    ):
        if ts < earliest_ms or ts > latest_ms:
            raise InvalidTimestampError(
                f"batch at position {position}: {name} {ts} outside the accepted window "
                f"[{earliest_ms}, {latest_ms}] (message.timestamp.before.max.ms / "
                f"message.timestamp.after.max.ms)"
            )


# Kafka's smallest entry after its 12-byte log overhead: a v0 message with a null key and
# value (crc 4, magic 1, attributes 1, key length 4, value length 4): its RECORD_OVERHEAD_V0.
MIN_ENTRY_LENGTH = 14
_ENTRY_LENGTH = struct.Struct(">i")


def frames_whole_entries(records: bytes | bytearray | memoryview) -> bool:
    """Whether `records` is a sequence of whole entries (v2 batches or legacy messages: both
    open with offset int64 and a length int32 of what follows) ending exactly at its end,
    read from the length fields alone: no CRC, no header check. What a relay checks before it
    puts two clients' record sets end to end (produce_coalescing.py): two cut halves of one
    batch must not make a batch that neither request sent."""
    view = memoryview(records).cast("B")
    position, total = 0, len(view)
    if total == 0:
        return False
    while position < total:
        if total - position < LOG_OVERHEAD:
            return False
        (length,) = _ENTRY_LENGTH.unpack_from(view, position + LENGTH_OFFSET)
        if length < MIN_ENTRY_LENGTH or length > total - position - LOG_OVERHEAD:
            return False
        position += LOG_OVERHEAD + length
    return True


def check_relayed_records(records: bytes | bytearray | memoryview) -> None:
    """What a relay can check without the node's configs, so that a request split across
    nodes is refused whole when any part of it is malformed: every entry framed, v2 headers
    and CRCs (legacy entries: their CRC), uncompressed records sections walked. Size limits,
    timestamps, keys on compacted topics and compressed contents are the node's to check
    with its own configs; they never differ between what it accepts and what it stores."""
    view = memoryview(records).cast("B")
    if not len(view):
        raise InvalidRecordError("empty append: no batches in the input")
    pos = 0
    while pos < len(view):
        if len(view) - pos <= MAGIC_OFFSET:
            raise CorruptRecordError(
                f"input ends with {len(view) - pos} stray bytes at position {pos}: "
                f"too short for a batch header"
            )
        magic = view[pos + MAGIC_OFFSET]
        if magic in (0, 1):
            pos += read_message(view, pos).size_in_bytes
            continue
        header = read_header(view, pos)
        check_batch(view, pos, header, max_batch_bytes=None)
        if magic == MAGIC_V2 and not header.attributes & COMPRESSION_MASK:
            check_records(
                view,
                pos,
                header,
                require_keys=False,
                max_uncompressed_bytes=header.size_in_bytes,
                check_max_timestamp=False,
            )
        pos += header.size_in_bytes


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
    on_section: Callable[[bytes | bytearray | memoryview], None] | None = None,
) -> RecordTimestamps:
    """Check the records of the batch at `position`; raise InvalidRecordError or
    CorruptRecordError naming the batch and what is wrong. `on_section` is given the records
    section once it passed, inflated, while its inflation is still counted in the budget: a
    caller that needs the records again (recompression) uses them there instead of
    inflating the batch a second time."""
    if header.max_timestamp < header.base_timestamp:
        raise InvalidRecordError(
            f"batch at position {position}: maxTimestamp {header.max_timestamp} is below "
            f"baseTimestamp {header.base_timestamp}"
        )
    raw = view[position + HEADER_BYTES : position + header.size_in_bytes]
    codec = header.attributes & COMPRESSION_MASK
    control = bool(header.attributes & CONTROL_MASK)
    # The inflated section is held, and counted in the process's budget, until it is scanned.
    with PROCESS_BUDGET.reservation() as grow:
        section: bytes | bytearray | memoryview = raw
        if codec:
            try:
                section = decompress_into_budget(codec, raw, max_uncompressed_bytes, grow)
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"batch at position {position}: {exc}") from None
        try:
            low, high = scan_records(section, header.record_count, require_keys and not control)
        except ValueError as exc:
            error = InvalidRecordError if "null key" in str(exc) else CorruptRecordError
            raise error(f"batch at position {position}: {exc}") from None
        if on_section is not None:
            on_section(section)
        del section
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
