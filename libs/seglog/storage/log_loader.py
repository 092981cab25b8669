"""Loading a log directory after any kind of stop, clean or not (Kafka's LogLoader): a
function of the directory, the segment factory and the recovery point that returns the
loaded segments and offsets, and never touches a Log.

Order of work, each step safe to repeat if the process dies during it:

1. Leftovers: `*.tmp` and `*.cleaned` files are incomplete work and are deleted;
   `*.deleted` files were already out of the log and are deleted; a `.swap` group is a
   finished cleaner output: the live segments it replaces are deleted and the swap files
   renamed to their final names (the in-process half is `Log.replace_segments`). Index
   files without a `.log` go.
2. Every `.log` opens as a segment. A segment is recovered (indexes rebuilt from the log,
   invalid tail cut) when it holds offsets at or past the recovery point, or when its
   indexes are missing or fail their sanity check. With a clean-shutdown marker only the
   latter applies.
   Under a clean-shutdown marker the last segment is still checked for a torn tail
   (`has_torn_tail`, a walk from its last index entry), which is cheap.
3. A segment whose tail was cut ends the log only when it is the unflushed tail (it holds
   offsets at or past the recovery point): any segment after it is deleted, since its data
   followed corruption and cannot be trusted to continue the offsets. Corruption found in a
   segment below the recovery point (fsynced, so not a crash's torn write) is reported and
   only that segment's invalid bytes are cut: the segments after it stay.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import log_files
from .leader_epoch_cache import LeaderEpochCache
from .segment import LogSegment
from .segment_factory import SegmentFactory

logger = logging.getLogger(__name__)


@dataclass
class LoadedLogOffsets:
    segments: list[LogSegment] = field(default_factory=list)
    log_end_offset: int = 0
    recovered_up_to: int = 0
    bytes_truncated: int = 0


def remove_leftovers(factory: SegmentFactory) -> None:
    directory = factory.directory
    swaps = []
    for path in sorted(directory.iterdir()):
        name = path.name
        if name.endswith((".tmp", log_files.CLEANED_SUFFIX, log_files.DELETED_SUFFIX)):
            path.unlink()
        elif name.endswith(log_files.LOG_SUFFIX + log_files.SWAP_SUFFIX):
            swaps.append(log_files.offset_from_name(name))
    for base_offset in swaps:
        _finish_swap_on_disk(factory, base_offset)
    # An index whose segment is gone (deleted, or never fully created) is an orphan.
    for path in directory.iterdir():
        is_index = path.name.endswith((log_files.INDEX_SUFFIX, log_files.TIME_INDEX_SUFFIX))
        offset = log_files.offset_from_name(path.name) if is_index else -1
        if is_index and not log_files.log_path(directory, offset).exists():
            path.unlink()
    log_files.fsync_directory(directory)


def _finish_swap_on_disk(factory: SegmentFactory, swap_base: int) -> None:
    """A `.swap` segment replaces the live segments whose base offsets fall in
    [swap base, swap next offset). A live segment whose records were all cleaned away may lie
    past the swap's next offset and survive: it holds only superseded records, offsets stay
    increasing, and the next cleaning removes it."""
    directory = factory.directory
    swap = factory.open(swap_base, log_files.SWAP_SUFFIX)
    swap.recover()
    next_offset = swap.read_next_offset()
    for path in directory.iterdir():
        if path.name.endswith(log_files.LOG_SUFFIX):
            base = log_files.offset_from_name(path.name)
            if swap_base <= base < next_offset:
                for suffix_path in segment_paths(directory, base):
                    if suffix_path.exists():
                        suffix_path.unlink()
    swap.change_suffix(log_files.SWAP_SUFFIX, "")
    swap.close()


def load_log(
    factory: SegmentFactory, recovery_point: int | None, epochs: LeaderEpochCache
) -> LoadedLogOffsets:
    """Open every segment, recovering what needs it. `recovery_point` None means the data
    dir was shut down cleanly. A recovered segment's batches rebuild the leader epochs from
    its base offset on; the epochs are cut to the loaded log's end."""
    directory = factory.directory
    remove_leftovers(factory)
    bases = sorted(
        log_files.offset_from_name(p.name)
        for p in directory.iterdir()
        if p.name.endswith(log_files.LOG_SUFFIX)
    )
    loaded = LoadedLogOffsets()
    for i, base in enumerate(bases):
        segment = factory.open(base)
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        is_tail = next_base is None or recovery_point is None or next_base > recovery_point
        unflushed = recovery_point is not None and is_tail
        if (
            unflushed
            or segment.needs_recovery()
            or (next_base is None and recovery_point is None and segment.has_torn_tail())
        ):
            epochs.truncate_from_end(base)
            cut = segment.recover(epochs)
            loaded.bytes_truncated += cut
            if cut and is_tail:
                loaded.segments.append(segment)
                _delete_segments(directory, bases[i + 1 :])
                break
            if cut:
                logger.error(
                    "%s: %d invalid bytes cut from flushed segment %d (below the recovery "
                    "point %s); the segments after it are kept",
                    directory.name,
                    cut,
                    base,
                    recovery_point,
                )
        loaded.segments.append(segment)
    if loaded.segments:
        last = loaded.segments[-1]
        loaded.log_end_offset = last.read_next_offset()
        # An empty segment after a cut-down one still starts at its own base offset.
        loaded.log_end_offset = max(loaded.log_end_offset, last.base_offset)
        loaded.recovered_up_to = loaded.log_end_offset
    epochs.truncate_from_end(loaded.log_end_offset)
    return loaded


def _delete_segments(directory: Path, bases: Sequence[int]) -> None:
    for base in bases:
        for path in segment_paths(directory, base):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def segment_paths(directory: Path, base_offset: int) -> list[Path]:
    return [
        log_files.log_path(directory, base_offset),
        log_files.index_path(directory, base_offset),
        log_files.time_index_path(directory, base_offset),
    ]
