"""A segment's recovery (indexes rebuilt from its `.log`, a damaged tail cut) and truncation
to an offset: the two ways a segment's end moves back."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..records import batch_table
from ..records.batch import CONTROL_MASK, NO_TIMESTAMP
from .batch_bounds import Damage

if TYPE_CHECKING:
    from .leader_epoch_cache import LeaderEpochCache
    from .segment import LogSegment


class SegmentRecovery(NamedTuple):
    """What `LogSegment.recover` did: bytes cut from the end of the `.log`, and the first
    check that failed there (None when the whole file was valid)."""

    bytes_truncated: int
    damage: Damage | None


def recover(
    segment: LogSegment, epochs: LeaderEpochCache | None, upper_bound: int | None
) -> SegmentRecovery:
    """Rebuild both indexes from the log and cut everything from the first batch that fails a
    check (`FileRecords.scan_valid_prefix`: CRC, and the offsets the CRC does not cover,
    bounded by the segment's base and `upper_bound`, the next segment's base). With
    `epochs`, a batch whose partitionLeaderEpoch is larger than the latest known starts that
    epoch at its base offset, as Kafka's LogSegment.recover does."""
    segment.append_ends.forget()
    segment.offset_index.reset()
    segment.time_index.reset()
    segment.max_timestamp_so_far = NO_TIMESTAMP
    segment.offset_of_max_timestamp = segment.base_offset
    segment.bytes_since_last_index_entry = 0
    segment.rolling_based_timestamp = None
    prefix = segment.log.scan_valid_prefix(segment.base_offset, upper_bound)
    headers = [header for _, header in prefix.batches]
    # A `.txnindex` entry comes from an ABORT marker in its own segment: with no control
    # batch the index is empty, known without the producer-state replay from an older
    # snapshot that a stale index costs (a whole log's headers read again when every index
    # is gone); with one, that replay rebuilds it.
    segment.txn_index_stale = any(h.attributes & CONTROL_MASK for h in headers)
    if not segment.txn_index_stale:
        segment.txn_index.reset()
    if epochs is not None:
        epochs.assign_from_batches((h.partition_leader_epoch, h.base_offset) for h in headers)
    table = batch_table.table_of((h.size_in_bytes, h.last_offset, h.max_timestamp) for h in headers)
    if headers:
        segment.rolling_based_timestamp = headers[0].max_timestamp
    # The valid prefix is contiguous from position 0: index it as one append.
    segment.index_table(0, table, -1)
    return SegmentRecovery(segment.log.truncate_to(prefix.size_in_bytes), prefix.damage)


def truncate(segment: LogSegment, offset: int) -> int:
    """Remove every batch holding an offset >= `offset` (a straddling batch goes whole);
    return bytes removed."""
    found = segment.translate_offset(offset)
    if found is None:
        return 0
    segment.append_ends.forget()
    position = found.position
    segment.offset_index.truncate_to(found.header.base_offset)
    segment.time_index.truncate_to(found.header.base_offset)
    cut = segment.log.truncate_to(position)
    segment.txn_index.truncate_to(offset)
    _recompute_max_timestamp(segment)
    segment.bytes_since_last_index_entry = segment.log.size - (
        segment.offset_index.entry(segment.offset_index.entries - 1).position
        if segment.offset_index.entries
        else 0
    )
    if segment.log.size == 0:
        segment.rolling_based_timestamp = None
    return cut


def _recompute_max_timestamp(segment: LogSegment) -> None:
    last = segment.time_index.last_entry
    segment.max_timestamp_so_far, segment.offset_of_max_timestamp = last.timestamp_ms, last.offset
    start = segment.offset_index.lookup(1 << 62).position
    for _, header in segment.log.batches(start):
        if header.max_timestamp > segment.max_timestamp_so_far:
            segment.max_timestamp_so_far = header.max_timestamp
            segment.offset_of_max_timestamp = header.last_offset
