"""Loading a log directory after any kind of stop, clean or not (Kafka's LogLoader): a
function of the directory, the segment factory and the recovery point that returns the
loaded segments and offsets, and never touches a Log.

Order of work, each step safe to repeat if the process dies during it:

1. Leftovers: `*.tmp` and `*.cleaned` files are incomplete work and are deleted;
   `*.deleted` files were already out of the log and are deleted; a `.swap` group is a
   finished cleaner output: the live segments it replaces are deleted and the swap files
   renamed to their final names (the in-process half is `Log.replace_segments`). Index
   files without a `.log` go.
2. Every `.log` opens as a segment. After a crash (no clean-shutdown marker) every segment
   is checked: one holding offsets at or past the recovery point is recovered (indexes
   rebuilt, the log walked with every check of `FileRecords.scan_valid_prefix`: CRC, and
   the fields the CRC does not cover against the segment's file-name base and the next
   segment's base); one below it, whose bytes were flushed, is walked with the same checks
   and its index entries compared with the batches, and recovered only when something
   fails. That costs one sequential read of the log after a crash, which Kafka skips below
   the recovery point; it is what turns a flipped bit there into a cut log rather than
   records served under offsets the log never had. With a clean-shutdown marker a segment
   is recovered only when its indexes are missing or fail their sanity check, or when its
   first batch or the batches from its last index entry on fail the header checks or do
   not end exactly at the end of the file (`segment_checks.boundary_damage`, a few header
   reads): a torn tail, or a flipped base offset at either end of a segment.
3. The log ends where the first damage begins, in whichever segment it is found; the
   segments after it are deleted (`_end_log_at_damage` says why), and the damage is logged
   with its file, byte position, what was expected and what was read. In a log that is not
   compacted, an unflushed segment that ends before the next segment's base (a power cut
   kept the file but not all its bytes) is damage too (`_missing_offsets`).
4. A `leader-epoch-checkpoint` that does not parse is rebuilt from the batches' headers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import log_files
from .batch_bounds import Damage
from .leader_epoch_cache import LeaderEpochCache
from .log_state import LogState
from .segment import LogSegment
from .segment_checks import boundary_damage, find_damage, indexes_need_rebuild
from .segment_factory import SegmentFactory
from .segment_repair import SegmentRecovery

logger = logging.getLogger(__name__)


@dataclass
class LoadedLogOffsets:
    segments: list[LogSegment] = field(default_factory=list)
    log_end_offset: int = 0
    recovered_up_to: int = 0
    bytes_truncated: int = 0
    recovered: bool = False  # some segment was rebuilt: its files need a flush


def remove_leftovers(factory: SegmentFactory) -> None:
    """Delete and finish what earlier work left; the directory is fsynced only when
    something here changed it (a new partition's empty directory costs no fsync: its
    creation is made durable by the first flush, which fsyncs the directory)."""
    directory = factory.directory
    swaps = []
    changed = False
    names = sorted(p.name for p in directory.iterdir())
    for name in names:
        if name.endswith((".tmp", log_files.CLEANED_SUFFIX, log_files.DELETED_SUFFIX)):
            (directory / name).unlink()
            changed = True
        elif name.endswith(log_files.LOG_SUFFIX + log_files.SWAP_SUFFIX):
            swaps.append(log_files.offset_from_name(name))
    for base_offset in swaps:
        _finish_swap_on_disk(factory, base_offset)
        changed = True
    if swaps:
        names = sorted(p.name for p in directory.iterdir())
    # An index whose segment is gone (deleted, or never fully created) is an orphan.
    logs = {name for name in names if name.endswith(log_files.LOG_SUFFIX)}
    for name in names:
        if name.endswith(log_files.SEGMENT_SUFFIXES[1:]):
            offset = log_files.offset_from_name(name)
            if log_files.log_path(directory, offset).name not in logs:
                (directory / name).unlink(missing_ok=True)
                changed = True
    if changed:
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
        unflushed = recovery_point is not None and (next_base is None or next_base > recovery_point)
        damage = None
        if unflushed or indexes_need_rebuild(segment):
            recover = True
        elif recovery_point is None:
            damage = boundary_damage(segment, next_base)
            recover = damage is not None
        else:
            damage = find_damage(segment, next_base)
            recover = damage is not None
        if recover:
            if unflushed:
                # Every segment from here on is recovered too and assigns its epochs again.
                # A segment recovered in the middle of kept ones must not drop the epochs of
                # the segments after it; if it is cut, the log ends there and the epochs are
                # cut to the new end below.
                epochs.truncate_from_end(base)
            recovered = segment.recover(epochs, upper_bound=next_base)
            loaded.recovered = True
            loaded.bytes_truncated += recovered.bytes_truncated
            loaded.segments.append(segment)
            if recovered.bytes_truncated:
                _end_log_at_damage(directory, segment, recovered, bases[i + 1 :], unflushed)
                break
            gap = _missing_offsets(segment, next_base) if unflushed else None
            if gap is not None and not factory.config.compact:
                _end_log_at_damage(
                    directory, segment, recovered._replace(damage=gap), bases[i + 1 :], unflushed
                )
                break
            if damage is not None:
                logger.warning(
                    "%s: segment %d's indexes did not match its log (%s); rebuilt from the log",
                    directory.name,
                    base,
                    damage.describe(),
                )
            continue
        # A segment holding data always leaves a `.txnindex`: missing or torn, it is rebuilt.
        segment.txn_index_stale = segment.size > 0 and segment.txn_index.is_torn()
        loaded.segments.append(segment)
    if epochs.needs_rebuild:
        _rebuild_epochs(loaded.segments, epochs)
    if loaded.segments:
        last = loaded.segments[-1]
        loaded.log_end_offset = last.read_next_offset()
        # An empty segment after a cut-down one still starts at its own base offset.
        loaded.log_end_offset = max(loaded.log_end_offset, last.base_offset)
        loaded.recovered_up_to = loaded.log_end_offset
    epochs.truncate_from_end(loaded.log_end_offset)
    return loaded


def _missing_offsets(segment: LogSegment, next_base: int | None) -> Damage | None:
    """An unflushed segment that ends before the next segment's base offset: a crash (a
    power cut) kept the files but not all their bytes, so a segment can come back empty or
    short at a batch boundary, whole-looking, with later segments after it. A log that is
    not compacted never skips offsets, so the offsets in between were lost, not removed."""
    if next_base is None:
        return None
    end = max(segment.read_next_offset(), segment.base_offset)
    if end >= next_base:
        return None
    return Damage(
        segment.size,
        f"the segment to end at offset {next_base} (the next segment's base offset)",
        f"its last batch ending at offset {end}: offsets {end}..{next_base - 1} missing",
        str(segment.log.path),
    )


def _rebuild_epochs(segments: Sequence[LogSegment], epochs: LeaderEpochCache) -> None:
    """The checkpoint file was unreadable: every batch header (not the records) assigns its
    epoch again, as appends and recovery do."""
    if epochs.entries:
        epochs.clear()
    for segment in segments:
        epochs.assign_from_batches(
            (found.header.partition_leader_epoch, found.header.base_offset)
            for found in segment.log.batches()
        )
    epochs.needs_rebuild = False


def _end_log_at_damage(
    directory: Path,
    segment: LogSegment,
    recovered: SegmentRecovery,
    later_bases: Sequence[int],
    unflushed: bool,
) -> None:
    """The log ends where the damage begins, in whichever segment it is, and the segments
    after it are deleted (Kafka deletes the unflushed segments after a corrupt one; seglog
    does the same below the recovery point). Keeping them would leave a hole: a replica
    whose log skips offsets believes it holds everything up to its end, never fetches the
    missing batches, and could be elected and serve the hole as the log. Cut to a prefix,
    it is a replica that is behind: it fetches the rest from the leader and its end offset
    shows it, so it is not elected over the replicas that have the data. The price, on a
    partition with no other replica, is the valid batches after the damage."""
    damage = recovered.damage
    what = damage.describe() if damage is not None else "an invalid tail"
    log_at = logger.warning if unflushed and not later_bases else logger.error
    log_at(
        "%s: corrupt data in %s %s; cut %d bytes, the log now ends at offset %d%s",
        directory.name,
        "unflushed segment" if unflushed else "segment below the recovery point",
        what,
        recovered.bytes_truncated,
        max(segment.read_next_offset(), segment.base_offset),
        f", and the {len(later_bases)} segments after it (base offsets {list(later_bases)}) "
        "are deleted"
        if later_bases
        else "",
    )
    _delete_segments(directory, later_bases)


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
        log_files.txn_index_path(directory, base_offset),
    ]


def open_state(state: LogState, *, created: bool) -> None:
    """Fill a new `LogState` from its directory: the segments (recovered from the recovery
    point after an unclean shutdown), the offsets from the data dir's checkpoints, the
    leader epochs and the producer state. `created`: the directory was made just now."""
    tp = (state.topic, state.partition)
    checkpointed_start = state._data_dir.log_start_offsets.get(tp, 0)
    recovery_point = (
        None if state._data_dir.clean_shutdown else state._data_dir.recovery_points.get(tp, 0)
    )
    loaded = (
        LoadedLogOffsets()  # a directory made just now holds nothing to load or clean
        if created
        else load_log(state.segment_factory, recovery_point, state.leader_epochs)
    )
    # A new log is empty: until it changes, losing its files loses nothing. One loaded
    # after a crash, or recovered here, has changes to make durable.
    state._changed_since_flush = state._snapshot_due = bool(loaded.segments) and (
        recovery_point is not None or loaded.recovered
    )
    if not loaded.segments:
        start = max(checkpointed_start, 0)
        loaded.segments = [state.segment_factory.open(start)]
        loaded.log_end_offset = start
    state._segments.set(loaded.segments)
    state._log_end_offset = loaded.log_end_offset
    state._log_start_offset = min(
        max(checkpointed_start, state._segments.first.base_offset), state._log_end_offset
    )
    state._recovery_point = (
        state._log_end_offset
        if recovery_point is None
        else min(max(recovery_point, loaded.recovered_up_to), state._log_end_offset)
    )
    state.leader_epochs.truncate_from_start(state._log_start_offset)
    state._set_high_watermark(state._data_dir.high_watermarks.get(tp, 0))
    if not created:  # a directory made just now holds no snapshot and no batch to replay
        state._rebuild_producer_state()
    for segment in state._segments.as_list()[:-1]:
        segment.on_become_inactive()
        segment.release_indexes()  # loaded by the checks above; idle until read
    # The active segment's indexes too wait for their first use: an idle partition keeps
    # no mapping (a node has vm.max_map_count, 65530 by default, of them).
    state._segments.active.release_indexes()
    state._make_active(state._segments.active)
    state._update_data_dir()
