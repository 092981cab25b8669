"""The strict walk recovery makes over a `.log` (`scan_valid_prefix`): the batches it keeps
from position 0, and the first damage that ends them, with the rules for which batch to blame
when a CRC-valid batch contradicts the ones before it in a field the CRC does not cover."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..records.batch import HEADER, HEADER_BYTES, BatchHeader, compute_crc
from .batch_bounds import BASE_OFFSET_CHECK, EPOCH_CHECK, Damage, header_damage

if TYPE_CHECKING:
    from .file_records import FileRecords

# Recovery reads the file in chunks of this size: large enough that per-call costs vanish
# against a 1 GiB segment, small enough to stay well inside memory.
SCAN_CHUNK_BYTES = 8 * 1024 * 1024


class BatchPosition(NamedTuple):
    position: int
    header: BatchHeader


class ValidPrefix(NamedTuple):
    """What recovery keeps of a segment: the valid batches from position 0, and what ended
    them (None when the whole file is valid)."""

    batches: list[BatchPosition]
    damage: Damage | None

    @property
    def size_in_bytes(self) -> int:
        return sum(found.header.size_in_bytes for found in self.batches)


def _blame_earlier(
    kept: list[BatchPosition], expected_before_last: int, header: BatchHeader, damage: Damage
) -> Damage:
    """Which batch to cut from when a CRC-valid batch contradicts the ones before it in a
    field the CRC does not cover (a flipped bit in either)."""
    if damage.check == BASE_OFFSET_CHECK:
        return _blame_a_jump_before(kept, expected_before_last, damage)
    return _blame_a_raised_epoch(kept, header.partition_leader_epoch, damage)


def _blame_a_jump_before(
    kept: list[BatchPosition], expected_before_last: int, damage: Damage
) -> Damage:
    """A batch whose base offset goes back below the previous batch's end, after a previous
    batch that skipped offsets forward, is the signature of a flipped bit raising that
    previous batch's baseOffset: a compacted log may skip offsets but never goes back. The
    previous batch is dropped too, so the log keeps no record under an offset it never had."""
    if not kept or kept[-1].header.base_offset <= expected_before_last:
        return damage
    jumped = kept.pop()
    return Damage(
        jumped.position,
        f"baseOffset {expected_before_last} or a little more (the batch after it starts at "
        f"{damage.found})",
        f"baseOffset {jumped.header.base_offset}",
    )


def _blame_a_raised_epoch(kept: list[BatchPosition], epoch: int, damage: Damage) -> Damage:
    """Epochs that go down: either this batch's epoch was lowered or an earlier one's raised.
    Which one cannot be told, so the log is cut at the first batch whose epoch is above
    this one: a raised epoch is never kept, and what is cut too much a replica fetches
    again."""
    first_above = next(
        (i for i, found in enumerate(kept) if found.header.partition_leader_epoch > epoch),
        len(kept),
    )
    if first_above == len(kept):
        return damage
    blamed = kept[first_above]
    del kept[first_above:]
    return Damage(
        blamed.position,
        f"partitionLeaderEpoch <= {epoch} (a later batch's; epochs never decrease)",
        f"partitionLeaderEpoch {blamed.header.partition_leader_epoch}",
    )


def _crc_damage(
    view: bytes | memoryview, pos: int, file_position: int, header: BatchHeader
) -> Damage | None:
    actual = compute_crc(view, pos, header.size_in_bytes)
    if actual == header.crc:
        return None
    return Damage(file_position, f"CRC-32C {header.crc:#010x} (stored)", f"{actual:#010x} computed")


def scan_valid_prefix(
    records: FileRecords, base_offset: int, upper_bound: int | None = None
) -> ValidPrefix:
    """The batches that recovery keeps, from position 0: whole, v2, CRC-valid, offsets
    increasing from `base_offset` (the segment's, from its file name) and below
    `upper_bound` (the next segment's), epochs not decreasing; and the damage that ended
    the walk (`batch_bounds.header_damage` has the checks the CRC does not cover)."""
    kept: list[BatchPosition] = []
    next_offset = expected_before_last = base_offset
    latest_epoch = -1
    position = 0
    end = records.size
    while position < end:
        chunk = records.read(position, min(SCAN_CHUNK_BYTES, end - position))
        if len(chunk) < HEADER_BYTES:
            short = Damage(position, "a whole batch header (61 bytes)", f"{len(chunk)} bytes")
            return ValidPrefix(kept, short._replace(file=str(records.path)))
        pos = 0
        while pos + HEADER_BYTES <= len(chunk):
            header = BatchHeader._make(HEADER.unpack_from(chunk, pos))
            damage = header_damage(
                header,
                position + pos,
                end,
                segment_base=base_offset,
                next_offset=next_offset,
                upper_bound=upper_bound,
                latest_epoch=latest_epoch,
            )
            if damage is None or damage.check in (BASE_OFFSET_CHECK, EPOCH_CHECK):
                if pos + header.size_in_bytes > len(chunk):
                    if pos > 0:
                        break  # read again from this batch
                    # One batch larger than the chunk: read alone, then checked like any
                    # other (the checks above included).
                    chunk = records.read(position, header.size_in_bytes)
                crc_damage = _crc_damage(chunk, pos, position + pos, header)
                if damage is not None and crc_damage is None:
                    # A real batch (its records pass the CRC) that contradicts an
                    # earlier one: the earlier one may be the damaged one.
                    damage = _blame_earlier(kept, expected_before_last, header, damage)
                damage = damage or crc_damage
            if damage is not None:
                return ValidPrefix(kept, damage._replace(file=str(records.path)))
            kept.append(BatchPosition(position + pos, header))
            expected_before_last, next_offset = next_offset, header.next_offset
            latest_epoch = max(latest_epoch, header.partition_leader_epoch)
            pos += header.size_in_bytes
        position += pos
    return ValidPrefix(kept, None)
