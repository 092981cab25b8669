"""Compaction (`cleanup_policy` compact): keep the latest record of each key.

One pass over a log:

1. Cleanable range: every segment but the active one, stopping at the first segment whose
   largest timestamp is newer than `min_compaction_lag_ms` (records must age before they can
   be compacted away). The pass runs only when the dirty part (bytes past the last cleaned
   offset) is at least `min_cleanable_dirty_ratio` of the cleanable bytes.
2. Offset map: key -> offset of its latest record in the cleanable range.
3. Segments are grouped (consecutive, the group's bytes <= `segment_bytes`, offsets spanning
   less than 2**31) and each group is rewritten into one `.cleaned` segment at the group's
   first base offset. A record stays when it is its key's latest; a tombstone (null value)
   stays until its segment is older than `delete_retention_ms`. Records without a key are
   kept (Kafka refuses them on compacted topics; the engine does not decode records on
   append, so it keeps what it cannot deduplicate). A batch that keeps every record is
   copied byte for byte; otherwise it is re-encoded with the same base offset, offsets,
   codec and producer fields. Offsets of kept records never change.
4. Swap, crash-safely: the finished `.cleaned` files are fsynced and renamed to `.swap`;
   the old segments are renamed to `.deleted`; the `.swap` files take their final names.
   A crash before step 4 leaves `.cleaned` files (discarded on load); during it, a `.swap`
   that the load finishes (see recovery.py).

The cleaned-up-to offset lives in memory per log (Kafka keeps it in
`cleaner-offset-checkpoint`); after a restart the whole log counts as dirty once.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..records.batch import COMPRESSION_MASK, RecordBatch
from ..records.builder import encode_batch
from . import log_files
from .clock import SYSTEM_CLOCK, Clock
from .log import Log
from .segment import AppendedBatch, LogSegment


class Cleaner:
    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock

    def cleanable_segments(self, log: Log) -> list[LogSegment]:
        now = self.clock.now_ms()
        out = []
        for segment in log.segments[:-1]:
            if (
                segment.size
                and segment.largest_timestamp_ms > now - log.config.min_compaction_lag_ms
            ):
                break
            out.append(segment)
        return out

    def dirty_ratio(self, log: Log, segments: Sequence[LogSegment]) -> float:
        total = sum(s.size for s in segments)
        if total == 0:
            return 0.0
        first_dirty = log.cleaned_up_to_offset
        dirty = sum(s.size for s in segments if s.base_offset >= first_dirty)
        return dirty / total

    def maybe_clean(self, log: Log) -> int:
        """Clean the log if it is dirty enough; return how many segments were rewritten."""
        segments = self.cleanable_segments(log)
        if not segments or self.dirty_ratio(log, segments) < log.config.min_cleanable_dirty_ratio:
            return 0
        return self.clean(log, segments)

    def clean(self, log: Log, segments: Sequence[LogSegment]) -> int:
        latest = self._build_offset_map(segments)
        horizon_ms = self.clock.now_ms() - log.config.delete_retention_ms
        rewritten = 0
        for group in self._group(log, segments):
            cleaned = self._clean_group(log, group, latest, horizon_ms)
            log.replace_segments([cleaned] if cleaned is not None else [], group)
            rewritten += len(group)
        end = segments[-1]
        log.cleaned_up_to_offset = end.read_next_offset() if end.size else end.base_offset
        return rewritten

    @staticmethod
    def _build_offset_map(segments: Sequence[LogSegment]) -> dict[bytes, int]:
        latest: dict[bytes, int] = {}
        for segment in segments:
            for position, header in segment.log.batches():
                batch = RecordBatch(segment.log.read(position, header.size_in_bytes))
                for record in batch.records():
                    if record.key is not None:
                        latest[record.key] = record.offset
        return latest

    @staticmethod
    def _group(log: Log, segments: Sequence[LogSegment]) -> list[list[LogSegment]]:
        groups: list[list[LogSegment]] = []
        for segment in segments:
            if groups:
                group = groups[-1]
                size = sum(s.size for s in group) + segment.size
                span = segment.read_next_offset() - group[0].base_offset
                if size <= log.config.segment_bytes and span < 0x7FFFFFFF:
                    group.append(segment)
                    continue
            groups.append([segment])
        return groups

    def _clean_group(
        self, log: Log, group: Sequence[LogSegment], latest: dict[bytes, int], horizon_ms: int
    ) -> LogSegment | None:
        directory = log.directory
        base = group[0].base_offset
        cleaned = LogSegment.open(
            directory,
            base,
            index_interval_bytes=log.config.index_interval_bytes,
            index_size_max_bytes=log.config.index_size_max_bytes,
            rolling_jitter_ms=0,
            now_ms=self.clock.now_ms(),
            suffix=log_files.CLEANED_SUFFIX,
        )
        for segment in group:
            drop_tombstones = segment.largest_timestamp_ms < horizon_ms
            for position, header in segment.log.batches():
                raw = segment.log.read(position, header.size_in_bytes)
                kept = self._retained_batch(raw, latest, drop_tombstones)
                if kept is not None:
                    batch = RecordBatch(kept)
                    h = batch.header
                    cleaned.append(
                        [kept], [AppendedBatch(h.size_in_bytes, h.last_offset, h.max_timestamp)]
                    )
        if cleaned.size == 0:
            cleaned.delete_files()
            return None
        cleaned.flush()
        cleaned.on_become_inactive()
        cleaned.change_suffix(log_files.CLEANED_SUFFIX, log_files.SWAP_SUFFIX)
        log_files.fsync_directory(directory)
        return cleaned

    @staticmethod
    def _retained_batch(
        raw: bytes, latest: dict[bytes, int], drop_tombstones: bool
    ) -> bytes | None:
        batch = RecordBatch(raw)
        records = batch.records()
        kept = [
            r
            for r in records
            if r.key is None
            or (latest.get(r.key) == r.offset and not (drop_tombstones and r.value is None))
        ]
        if len(kept) == len(records):
            return raw
        if not kept:
            return None
        h = batch.header
        return encode_batch(
            kept,
            base_offset=h.base_offset,
            last_offset_delta=h.last_offset_delta,
            compression=h.attributes & COMPRESSION_MASK,
            attributes=h.attributes,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            partition_leader_epoch=h.partition_leader_epoch,
            max_timestamp=h.max_timestamp,
        )
