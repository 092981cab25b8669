"""The append path as it was before the single-pass scan (per-batch Python: the C header scan
`scan_input`, a crc32c call per batch, offsets assigned batch by batch, index entries one
batch at a time), kept as the reference test_single_pass_append compares the storage engine
with: the same inputs must be refused with the same errors, and accepted ones must give the
same bytes and index entries."""

from __future__ import annotations

from crc32c import crc32c

from seglog.errors import InvalidRecordError
from seglog.records._scan import scan_input
from seglog.records.batch import ATTRIBUTES_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, BatchHeader
from seglog.records.compression import MAX_CODEC
from seglog.storage.config import LOG_APPEND_TIME, LogConfig
from seglog.storage.validation import _check_inside, _explain, _upconvert_all


def validate_records(
    records: bytes | bytearray | memoryview, config: LogConfig, now_ms: int
) -> tuple[memoryview, list[tuple[int, BatchHeader]]]:
    """The old validate_records; returns (view, batches)."""
    view = memoryview(records).cast("B") if not isinstance(records, bytes) else memoryview(records)
    total = len(view)
    if total == 0:
        raise InvalidRecordError("empty append: no batches in the input")
    check_timestamps = config.message_timestamp_type != LOG_APPEND_TIME
    earliest = now_ms - config.message_timestamp_before_max_ms
    latest = now_ms + config.message_timestamp_after_max_ms
    # One C call checks every header and walks every uncompressed records section (no
    # Python work per batch but the CRC); it stops at the first batch that is not v2 or fails
    # a check, and only that batch goes through `_explain`, which names the problem.
    batches, slow, stop = scan_input(
        view,
        BatchHeader,
        config.max_message_bytes,
        MAX_CODEC,
        check_timestamps,
        earliest,
        latest,
        config.compact,
    )
    slow_indexes = set(slow)
    for index, (pos, header) in enumerate(batches):
        if crc32c(view[pos + ATTRIBUTES_OFFSET : pos + header.batch_length + LOG_OVERHEAD]) != (
            header.crc
        ):
            _explain(view, pos, config, now_ms)
        if index in slow_indexes:
            _check_inside(view, pos, header, config, earliest if check_timestamps else None)
    if stop < total:
        if total - stop > MAGIC_OFFSET and view[stop + MAGIC_OFFSET] in (0, 1):
            upconverted = _upconvert_all(view, config.max_uncompressed_batch_bytes)
            return validate_records(upconverted, config, now_ms)
        _explain(view, stop, config, now_ms)
    return view, batches


def index_entries(
    batches: list[tuple[int, int, int]],
    *,
    position: int,
    interval: int,
    state: tuple[int, int, int],
    last_time_ms: int,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], tuple[int, int, int]]:
    """The old LogSegment._index_batches over (size, last offset, max timestamp) batches,
    room unlimited, with TimeIndex.append_entries' filter (only growing timestamps are
    kept): (offset entries, time entries, (since last entry, max timestamp, its offset))."""
    since_last_entry, max_timestamp, offset_of_max = state
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    for size, last_offset, timestamp in batches:
        if timestamp > max_timestamp:
            max_timestamp, offset_of_max = timestamp, last_offset
        if since_last_entry > interval:
            offset_entries.append((last_offset, position))
            if max_timestamp > last_time_ms:
                time_entries.append((max_timestamp, offset_of_max))
                last_time_ms = max_timestamp
            since_last_entry = 0
        since_last_entry += size
        position += size
    return offset_entries, time_entries, (since_last_entry, max_timestamp, offset_of_max)
