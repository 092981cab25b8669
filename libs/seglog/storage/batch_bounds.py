"""What recovery checks in a stored batch beyond its CRC.

The CRC-32C of a v2 batch covers from `attributes` to the end, so a flipped bit in
`baseOffset`, `batchLength`, `partitionLeaderEpoch` or `magic` passes it. Those fields are
checked against what the file's place in the log says they must be: the batch starts at or
after the previous batch's next offset (the first one at or after the segment's base offset,
taken from its 20-digit file name), its leader epoch is not below an earlier batch's, it
ends below the next segment's base offset, its offsets
fit the indexes' 32-bit relative offsets, its length is at least a header and stays inside the
file, and its magic is 2. `Damage` says where the first failed check was and what it expected,
so the operator reading the log line can find the bytes.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import SeglogError
from ..records.batch import MAGIC_V2, MIN_BATCH_LENGTH, BatchHeader, check_header

BASE_OFFSET_CHECK = "base offset"
EPOCH_CHECK = "leader epoch"

# Index entries hold offsets relative to the segment's base as int32 (Kafka's
# canConvertToRelativeOffset): a batch whose last offset is further on cannot be in the segment.
MAX_RELATIVE_OFFSET = 0x7FFFFFFF


class Damage(NamedTuple):
    """The first bytes of a segment that recovery refused, in words for the log."""

    position: int
    expected: str
    found: str
    file: str = ""
    # Which check failed: BASE_OFFSET and EPOCH failures may blame an earlier batch.
    check: str = ""

    def describe(self) -> str:
        return f"{self.file} at byte {self.position}: expected {self.expected}, read {self.found}"


def header_damage(
    header: BatchHeader,
    position: int,
    file_size: int,
    *,
    segment_base: int,
    next_offset: int,
    upper_bound: int | None,
    latest_epoch: int = -1,
) -> Damage | None:
    """The first header-only check `header` (read at `position`) fails, or None."""
    if header.magic != MAGIC_V2:
        return Damage(position, f"magic {MAGIC_V2}", f"magic {header.magic}")
    if header.batch_length < MIN_BATCH_LENGTH:
        return Damage(
            position, f"batchLength >= {MIN_BATCH_LENGTH}", f"batchLength {header.batch_length}"
        )
    if position + header.size_in_bytes > file_size:
        return Damage(
            position,
            f"a batch ending inside the file ({file_size} bytes)",
            f"batchLength {header.batch_length}, ending at byte {position + header.size_in_bytes}",
        )
    if header.base_offset < next_offset:
        return Damage(
            position,
            f"baseOffset >= {next_offset} (segment base {segment_base}, offsets increasing)",
            f"baseOffset {header.base_offset}",
            check=BASE_OFFSET_CHECK,
        )
    if upper_bound is not None and header.last_offset >= upper_bound:
        return Damage(
            position,
            f"last offset < {upper_bound} (the next segment's base offset)",
            f"baseOffset {header.base_offset}, last offset {header.last_offset}",
        )
    if header.last_offset - segment_base > MAX_RELATIVE_OFFSET:
        return Damage(
            position,
            f"last offset <= {segment_base + MAX_RELATIVE_OFFSET} (segment base + 2^31 - 1)",
            f"last offset {header.last_offset}",
        )
    epoch = header.partition_leader_epoch
    # Leader epochs never decrease along a log; -1 is a batch no leader stamped.
    if epoch < -1 or (epoch != -1 and epoch < latest_epoch):
        return Damage(
            position,
            f"partitionLeaderEpoch >= {latest_epoch} (the epochs before it) or -1",
            f"partitionLeaderEpoch {epoch}",
            check=EPOCH_CHECK if epoch >= -1 else "",
        )
    try:
        check_header(header, position)
    except SeglogError as exc:
        return Damage(position, "a valid batch header", str(exc))
    return None
