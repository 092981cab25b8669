"""What a segment's files are checked against at load, without changing them (log_loader
decides what to cut): whether its indexes must be rebuilt (`indexes_need_rebuild`), the
cheap check after a clean shutdown (`boundary_damage`) and the full one after a crash
(`find_damage`). Each answers the first `Damage` found, naming the
file, byte, what was expected and what was read, or None."""

from __future__ import annotations

from ..errors import CorruptIndexError
from ..records.batch import HEADER_BYTES, LOG_OVERHEAD, MAGIC_V2
from .batch_bounds import Damage, header_damage
from .segment import LogSegment


def indexes_need_rebuild(segment: LogSegment) -> bool:
    """Indexes missing or failing their sanity check: rebuild from the log."""
    if (
        segment.log.size
        and segment.offset_index.entries == 0
        and segment.log.size > segment.index_interval_bytes
    ):
        return True
    try:
        segment.offset_index.sanity_check(segment.log.size)
        segment.time_index.sanity_check()
    except CorruptIndexError:
        return True
    return not _index_points_at_batches(segment)


def _index_points_at_batches(segment: LogSegment) -> bool:
    """Do sampled offset-index entries (first, middle, last) sit on the start of the batch
    holding their offset? An entry pointing inside a batch would make reads search from
    the wrong place and skip to the next segment; a few header reads catch it."""
    entries = segment.offset_index.entries
    for slot in sorted({0, entries // 2, entries - 1} if entries else set()):
        entry = segment.offset_index.entry(slot)
        if entry.position + HEADER_BYTES > segment.log.size:
            return False
        header = segment.log.header_at(entry.position)
        if (
            header.magic != MAGIC_V2
            or header.batch_length < HEADER_BYTES - LOG_OVERHEAD
            or not header.base_offset <= entry.offset <= header.last_offset
        ):
            return False
    return True


def boundary_damage(segment: LogSegment, upper_bound: int | None) -> Damage | None:
    """The cheap check of a segment after a clean shutdown: its first batch and the
    batches from its last index entry on (at most about `index_interval_bytes` and one
    batch) must pass the header checks (`batch_bounds.header_damage`: offsets inside
    the segment's file-name bounds, length, magic), and the walk must end exactly at the
    end of the file. A file extended after the marker was written, a partial write, or a
    flipped bit in a base offset at either end of the segment is noticed here without
    reading the segment; the full walk is for starts after a crash."""
    size = segment.log.size
    if size == 0:
        return None
    if size < HEADER_BYTES:
        return Damage(0, "a whole batch header (61 bytes)", f"{size} bytes", str(segment.log.path))
    first = segment.log.header_at(0)
    damage = header_damage(
        first,
        0,
        size,
        segment_base=segment.base_offset,
        next_offset=segment.base_offset,
        upper_bound=upper_bound,
    )
    if damage is not None:
        return damage._replace(file=str(segment.log.path))
    start = segment.offset_index.lookup(1 << 62).position
    if not 0 <= start < size:
        return Damage(
            start,
            f"an index position inside the log ({size} bytes)",
            f"position {start}",
            str(segment.offset_index.path),
        )
    end = start
    next_offset = segment.base_offset
    for found in segment.log.batches(start):
        damage = header_damage(
            found.header,
            found.position,
            size,
            segment_base=segment.base_offset,
            next_offset=next_offset,
            upper_bound=upper_bound,
        )
        if damage is not None:
            return damage._replace(file=str(segment.log.path))
        next_offset = found.header.next_offset
        end = found.position + found.header.size_in_bytes
    if end != size:
        return Damage(
            end,
            f"a batch ending at byte {size} (the end of the file)",
            "bytes that are not a whole batch",
            str(segment.log.path),
        )
    return None


def find_damage(segment: LogSegment, upper_bound: int | None) -> Damage | None:
    """The check of a segment whose bytes were flushed before a crash, without touching
    it: every batch as `recover` checks it (CRC and the fields outside it), and every
    index entry must name a batch the walk found (an offset entry: the position a batch
    starts at and that batch's last offset; a time entry: a batch's last offset and its
    max timestamp). Indexes are derived data with no checksum: an entry that does not
    match the log would send reads to the wrong batch, so a mismatch means rebuild."""
    prefix = segment.log.scan_valid_prefix(segment.base_offset, upper_bound)
    if prefix.damage is not None:
        return prefix.damage
    last_offset_at = {found.position: found.header.last_offset for found in prefix.batches}
    for slot in range(segment.offset_index.entries):
        entry = segment.offset_index.entry(slot)
        if last_offset_at.get(entry.position) != entry.offset:
            return Damage(
                slot * segment.offset_index.ENTRY.size,
                f"an entry naming a batch of {segment.log.path.name}",
                f"offset {entry.offset} at position {entry.position}",
                str(segment.offset_index.path),
            )
    max_timestamp_of = {
        found.header.last_offset: found.header.max_timestamp for found in prefix.batches
    }
    for slot in range(segment.time_index.entries):
        time_entry = segment.time_index.entry(slot)
        if max_timestamp_of.get(time_entry.offset) != time_entry.timestamp_ms:
            return Damage(
                slot * segment.time_index.ENTRY.size,
                f"an entry naming a batch of {segment.log.path.name}",
                f"timestamp {time_entry.timestamp_ms} at offset {time_entry.offset}",
                str(segment.time_index.path),
            )
    return None
