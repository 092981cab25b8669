"""The append path before the write: validation of a whole input before any byte of it is
written, then offset assignment.

Per batch: the header (magic, lengths), the declared size against the input, recordCount
against lastOffsetDelta, `max_message_bytes`, the CRC-32C, the batch's base and max
timestamps against `message_timestamp_{before,after}_max_ms` (CreateTime topics; control
batches are exempt), and the records inside (records/checks.py). Headers, CRCs and
uncompressed records sections are checked by one C call over the whole input
(records/_scan.c: scan_append), which leaves a table of the batches (records/batch_table.py)
and no Python object per batch; compressed, control and LogAppendTime batches have their
insides checked in Python after decompression. Legacy (magic 0/1) entries are up-converted to
v2 first, as a broker does for old producers; that is the only path here that touches
individual records.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from ..errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
)
from ..records import batch_table
from ..records._scan import scan_append, scan_follower
from ..records.batch import (
    CONTROL_MASK,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    read_header,
    stamp_log_append_time,
)
from ..records.checks import check_batch, check_records, check_timestamp_window
from ..records.compression import MAX_CODEC
from ..records.legacy import read_message, upconvert_counted
from .config import LOG_APPEND_TIME, LogConfig
from .segment import AppendedBatch

# baseOffset, batchLength, partitionLeaderEpoch: the prefix an append rewrites.
_REWRITTEN_PREFIX = struct.Struct(">qii")


class ValidatedRecords:
    """An input that passed validation: its bytes (v2 only) and the scan's table of its
    batches (records/batch_table.py), ready for offsets to be assigned. `offsets`: the
    records the batches hold; `max_timestamp`: their largest maxTimestamp; `flags`:
    batch_table.HAS_PRODUCER, EPOCHS_VARY. Immutable by convention; a class with slots, not
    a frozen dataclass, as it is made once per append (~1 us less)."""

    __slots__ = (
        "view",
        "table",
        "offsets",
        "max_timestamp",
        "flags",
        "validated_at_ms",
        "bodies",
        "_batches",
    )

    def __init__(
        self,
        view: memoryview,
        table: bytes,
        offsets: int,
        max_timestamp: int,
        flags: int,
        validated_at_ms: int,
        bodies: dict[int, bytes] | None = None,
    ) -> None:
        self.view = view
        self.table = table
        self.offsets = offsets
        self.max_timestamp = max_timestamp
        self.flags = flags
        self.validated_at_ms = validated_at_ms
        # What `rebody` made of a batch's records section while validation held it inflated,
        # by the batch's position (recompression.py): the batch is not inflated again.
        self.bodies: dict[int, bytes] = {} if bodies is None else bodies
        self._batches: list[tuple[int, BatchHeader]] | None = None

    @property
    def batches(self) -> list[tuple[int, BatchHeader]]:
        """Each batch's position and header, read when a path needs them in Python
        (idempotent producers, LogAppendTime, recompression): not on the plain append."""
        if self._batches is None:
            self._batches = batch_table.headers(self.view, self.table)
        return self._batches

    @property
    def batch_count(self) -> int:
        return batch_table.batch_count(self.table)

    @classmethod
    def of_checked(cls, view: memoryview, validated_at_ms: int) -> ValidatedRecords:
        """Batches this node built from checked ones (recompression): scanned for their table
        with no limit but their well-formedness."""
        table, _, stop, offsets, max_timestamp, flags = scan_append(
            view, 1 << 62, MAX_CODEC, False, 0, 0, False
        )
        if stop != len(view):
            raise AssertionError(f"rebuilt batches do not scan: stopped at {stop}")
        return cls(view, table, offsets, max_timestamp, flags, validated_at_ms)


# Given a batch's header and its records section (inflated) once it passed its checks,
# the section to store instead (recompressed), or None to keep the batch as it is.
Rebody = Callable[[BatchHeader, bytes | bytearray | memoryview], bytes | None]


def validate_records(
    records: bytes | bytearray | memoryview,
    config: LogConfig,
    now_ms: int,
    rebody: Rebody | None = None,
) -> ValidatedRecords:
    """Validate the whole input. With `rebody`, each batch whose records section is
    inflated to check it (a compressed one) is handed to it while the section is inflated
    and counted in the process's inflation budget; what it returns is in `bodies`."""
    view = memoryview(records).cast("B") if not isinstance(records, bytes) else memoryview(records)
    total = len(view)
    if total == 0:
        raise InvalidRecordError("empty append: no batches in the input")
    check_timestamps = config.message_timestamp_type != LOG_APPEND_TIME
    earliest = now_ms - config.message_timestamp_before_max_ms
    latest = now_ms + config.message_timestamp_after_max_ms
    # One C call checks every header and CRC and walks every uncompressed records section
    # (no Python work per batch); it stops at the first batch that is not v2 or fails a
    # check, and only that batch goes through `_explain`, which names the problem. The
    # batches before it that the scan cannot judge inside (`slow`) are checked first, in
    # order: the first failing batch of the input is the one named.
    table, slow, stop, offsets, max_timestamp, flags = scan_append(
        view,
        config.max_message_bytes,
        MAX_CODEC,
        check_timestamps,
        earliest,
        latest,
        config.compact,
    )
    bodies: dict[int, bytes] = {}
    for pos in slow:
        header = read_header(view, pos)
        if header.attributes & CONTROL_MASK:  # control batches are always slow
            flags |= batch_table.HAS_CONTROL
        _check_inside(
            view,
            pos,
            header,
            config,
            earliest if check_timestamps else None,
            None if rebody is None else _keeper(rebody, header, pos, bodies),
        )
    if stop < total:
        if total - stop > MAGIC_OFFSET and view[stop + MAGIC_OFFSET] in (0, 1):
            upconverted = _upconvert_all(view, config.max_uncompressed_batch_bytes)
            return validate_records(upconverted, config, now_ms, rebody)
        _explain(view, stop, config, now_ms)
    return ValidatedRecords(view, table, offsets, max_timestamp, flags, now_ms, bodies)


def _keeper(
    rebody: Rebody, header: BatchHeader, pos: int, bodies: dict[int, bytes]
) -> Callable[[bytes | bytearray | memoryview], None]:
    def keep(section: bytes | bytearray | memoryview) -> None:
        body = rebody(header, section)
        if body is not None:
            bodies[pos] = body

    return keep


@dataclass(frozen=True)
class FollowerRecords:
    """A follower's input that passed `validate_follower_records`: the scan's table, the
    offsets it covers, its largest timestamp, and its flags (as ValidatedRecords')."""

    view: memoryview
    table: bytes
    first_offset: int
    last_offset: int
    max_timestamp: int
    flags: int


def scan_follower_records(
    records: bytes | bytearray | memoryview, next_offset: int, *, gaps_allowed: bool
) -> FollowerRecords:
    """`validate_follower_records`' checks in one C call over the input (records/_scan.c:
    scan_follower); the first batch it stops at is named by `validate_follower_records`."""
    view = memoryview(records).cast("B")
    table, stop, max_timestamp, flags = scan_follower(view, next_offset, gaps_allowed, MAX_CODEC)
    if stop < len(view) or not table:
        validate_follower_records(view, next_offset, gaps_allowed=gaps_allowed)
        # Only an offset past 2^63 - 1 gets here: the scan refuses it, the loop cannot see it.
        raise CorruptRecordError(
            f"replicated batch at position {stop}: its offsets run past 2^63 - 1"
        )
    first, last = batch_table.entry(table, 0), batch_table.entry(table, -1)
    return FollowerRecords(
        view,
        table,
        first.base_offset,
        last.base_offset + last.last_offset_delta,
        max_timestamp,
        flags,
    )


def validate_follower_records(
    records: bytes | bytearray | memoryview, next_offset: int, *, gaps_allowed: bool
) -> list[tuple[int, BatchHeader]]:
    """A follower's check of the leader's bytes before appending them as they are (Kafka's
    appendAsFollower): whole v2 batches, CRC-valid, offsets increasing from `next_offset` on,
    with no gap unless `gaps_allowed` (a compacted leader has them). The gap check is not
    Kafka's: baseOffset is outside the CRC, so a leader whose older segment had a bit flipped
    after a clean shutdown (recovery then checks only headers it reads) would hand a batch at
    offset 2^60 on, and the follower would roll a segment there and wedge the partition. The
    leader validated the records; size limits and timestamps are its configs' to judge."""
    view = memoryview(records).cast("B")
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0  # the per-batch loop that names what scan_follower refused
    expected = next_offset
    while pos < len(view):
        if len(view) - pos < HEADER_BYTES:
            raise CorruptRecordError(f"replicated data ends inside a batch header at {pos}")
        header = read_header(view, pos)
        check_batch(view, pos, header, max_batch_bytes=None)
        if header.base_offset < expected:
            raise InvalidRecordError(
                f"replicated batch at position {pos} starts at offset {header.base_offset}, "
                f"below the next offset {expected}: offsets must increase"
            )
        if header.base_offset > expected and not gaps_allowed:
            raise CorruptRecordError(
                f"replicated batch at position {pos} starts at offset {header.base_offset}, "
                f"past the next offset {expected}: a log that is not compacted has no gaps "
                f"(the leader's copy is damaged)"
            )
        batches.append((pos, header))
        expected = header.next_offset
        pos += header.size_in_bytes
    if not batches:
        raise InvalidRecordError("empty replicated append: no batches")
    return batches


def _check_inside(
    view: memoryview,
    pos: int,
    header: BatchHeader,
    config: LogConfig,
    earliest: int | None,
    on_section: Callable[[bytes | bytearray | memoryview], None] | None = None,
) -> None:
    """The records inside the batch (records/checks.py), and their earliest timestamp
    against the window when the topic keeps CreateTime."""
    timestamps = check_records(
        view,
        pos,
        header,
        require_keys=config.compact,
        max_uncompressed_bytes=config.max_uncompressed_batch_bytes,
        check_max_timestamp=earliest is not None,
        on_section=on_section,
    )
    if (
        earliest is not None
        and not header.attributes & CONTROL_MASK
        and timestamps.min_ms < earliest
    ):
        raise InvalidTimestampError(
            f"batch at position {pos}: a record's timestamp {timestamps.min_ms} is before "
            f"the accepted window's start {earliest} (message.timestamp.before.max.ms)"
        )


def _explain(view: memoryview, pos: int, config: LogConfig, now_ms: int) -> NoReturn:
    """Raise the error that names what is wrong with the batch at `pos`."""
    total = len(view)
    if total - pos <= MAGIC_OFFSET:
        raise CorruptRecordError(
            f"input ends with {total - pos} stray bytes at position {pos}: "
            f"too short for a batch header"
        )
    header = read_header(view, pos)
    check_batch(view, pos, header, max_batch_bytes=config.max_message_bytes)
    if config.message_timestamp_type != LOG_APPEND_TIME and not header.attributes & CONTROL_MASK:
        check_timestamp_window(
            pos,
            header,
            now_ms - config.message_timestamp_before_max_ms,
            now_ms + config.message_timestamp_after_max_ms,
        )
    check_timestamps = config.message_timestamp_type != LOG_APPEND_TIME
    earliest = now_ms - config.message_timestamp_before_max_ms
    _check_inside(view, pos, header, config, earliest if check_timestamps else None)
    raise AssertionError(f"batch at position {pos} failed validation for no named reason")


def _upconvert_all(view: memoryview, max_uncompressed_bytes: int) -> bytes:
    """Every legacy entry as a v2 batch. The whole input's decompressed wrappers share one
    budget: nested gzip wrappers must not turn a 1 MB request into gigabytes."""
    parts = []
    pos = 0
    budget = max_uncompressed_bytes
    while pos < len(view):
        if view[pos + MAGIC_OFFSET] == MAGIC_V2:
            size = read_header(view, pos).size_in_bytes
            parts.append(bytes(view[pos : pos + size]))
        else:
            message = read_message(view, pos)
            converted, inflated = upconvert_counted(message, budget)
            budget -= inflated
            if budget < 0:
                raise CorruptRecordError(
                    f"legacy messages up to position {pos} decompress to more than "
                    f"{max_uncompressed_bytes} bytes (max.uncompressed.batch.bytes)"
                )
            parts.append(converted)
            size = message.size_in_bytes
        pos += size
    return b"".join(parts)


def assign_offsets(
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    first_offset: int,
    leader_epoch: int | None,
    stamp_ms: int,
) -> tuple[list[bytes | bytearray | memoryview], list[AppendedBatch], int]:
    """Give validated batches their offsets from `first_offset` on, without copying them:
    per batch, a new 16-byte prefix (baseOffset, batchLength, partitionLeaderEpoch, none of
    them under the CRC) followed by a view of the rest. With LogAppendTime the timestamps,
    which the CRC covers, change too, so such a batch is copied and re-checksummed.
    Returns (buffers to write in order, what each batch became, the largest timestamp)."""
    buffers: list[bytes | bytearray | memoryview] = []
    appended: list[AppendedBatch] = []
    add_buffer, add_batch = buffers.append, appended.append
    pack_prefix = _REWRITTEN_PREFIX.pack
    new_batch = tuple.__new__  # AppendedBatch(...) without the generated __new__: once per batch
    next_offset = first_offset
    max_timestamp = NO_TIMESTAMP
    for pos, header in batches:
        batch_length = header.batch_length
        size = batch_length + LOG_OVERHEAD
        epoch = header.partition_leader_epoch if leader_epoch is None else leader_epoch
        if stamp_ms != NO_TIMESTAMP:
            # LogAppendTime changes covered bytes: this batch is copied and re-checksummed.
            copy = bytearray(view[pos : pos + size])
            stamp_log_append_time(copy, 0, stamp_ms)
            _REWRITTEN_PREFIX.pack_into(copy, 0, next_offset, batch_length, epoch)
            add_buffer(copy)
            batch_max_ts = stamp_ms
        else:
            add_buffer(pack_prefix(next_offset, batch_length, epoch))
            add_buffer(view[pos + _REWRITTEN_PREFIX.size : pos + size])
            batch_max_ts = header.max_timestamp
        last_offset = next_offset + header.last_offset_delta
        add_batch(new_batch(AppendedBatch, (size, last_offset, batch_max_ts)))
        if batch_max_ts > max_timestamp:
            max_timestamp = batch_max_ts
        next_offset = last_offset + 1
    return buffers, appended, max_timestamp
