"""Compaction (`cleanup_policy` compact): keep the latest record of each key, as Kafka's
LogCleaner does.

One pass over a log:

1. Cleanable range [first dirty, first uncleanable): the first dirty offset is the
   cleaner-offset checkpoint (reset to the log start when it lies outside the log); the range
   ends at the active segment, and, when `min_compaction_lag_ms` > 0, at the first dirty
   segment whose largest timestamp is newer than that lag (0 means no lag check at all).
   The pass runs when the dirty bytes are more than `min_cleanable_dirty_ratio` of the log's
   bytes from its start to the first uncleanable segment, or at once when a dirty segment's
   first batch is older than `max_compaction_lag_ms` (rolls are capped by the same lag on
   compacted topics, so no record waits longer than that in the active segment). It never
   reaches the first unstable offset (an open transaction, or one whose marker is not yet
   replicated): whether those records stay is not known yet (Kafka stops at the LSO).
2. Offset map: key -> offset of its latest record in the dirty range, for data batches only
   (control batches carry transaction markers, not keys), and not those of aborted
   transactions (the segments' `.txnindex`): an aborted write never supersedes a committed
   one. The map is bounded as Kafka's
   SkimpyOffsetMap is: one buffer of `log.cleaner.dedupe.buffer.size` bytes holding 24-byte
   slots (a key's 16-byte MD5 digest, an 8-byte offset), filled to 90%. A full map ends the
   pass at the last batch it covers, and the next pass goes on from there.
3. Segments from the log start up to the map's end are grouped (the group's bytes <=
   `segment_bytes`, offsets spanning < 2**31) and each group is rewritten into one
   `.cleaned` segment at its first base offset. In a data batch a record stays when its
   offset is past the map's end, or it is its key's latest and either has a value or is a
   tombstone still inside its delete horizon; keyless records go (Kafka refuses them on
   compacted topics and drops what older data holds). The first clean that keeps a
   tombstone stamps its batch with a delete horizon, now + `delete_retention_ms`
   (baseTimestamp, attribute bit 0x40), and the tombstone goes at the first clean after it:
   consumers have `delete_retention_ms` to see it however long the log waited to be
   cleaned. Control batches stay whole; aborted transactions' data batches go, their
   `.txnindex` entries are copied to the cleaned segment. A batch that keeps every record
   (and needs no horizon) is copied byte for byte; otherwise it is re-encoded with the same
   base and last offset, codec and producer fields, and a max timestamp recomputed from the
   records it keeps. A batch left with no record goes, except the last batch of the pass,
   which stays as an empty batch so the log keeps its last offset.
4. Swap, crash-safely (`Log.replace_segments`): the finished `.cleaned` files are fsynced
   and renamed to `.swap`; the old segments are renamed to `.deleted`; the `.swap` files
   take their final names. A crash before that leaves `.cleaned` files (discarded on load);
   during it, a `.swap` that the load finishes (see log_loader.py).
5. The first offset not cleaned goes to the data dir's `cleaner-offset-checkpoint`.

Every batch read is CRC-checked. A corrupt batch (or any other failure) aborts the pass
without touching the log and marks the partition uncleanable: it is logged once, skipped by
later passes, and keeps serving reads and appends (Kafka's markPartitionUncleanable).
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..errors import CorruptRecordError
from ..records.batch import COMPRESSION_MASK, DELETE_HORIZON_MASK, BatchHeader, RecordBatch
from ..records.record import LOG_APPEND_TIME, Record
from ..records.rewrite import encode_batch, encode_empty_batch
from . import log_files
from .cleaner_txn import TxnCleaning
from .clock import SYSTEM_CLOCK, Clock
from .log import Log
from .segment import AppendedBatch, LogSegment

logger = logging.getLogger(__name__)

OFFSET_MAP_BYTES_PER_ENTRY = 24  # Kafka's SkimpyOffsetMap: a 16-byte MD5 and an 8-byte offset
OFFSET_MAP_LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default
_DIGEST_BYTES = 16
_EMPTY_DIGEST = bytes(_DIGEST_BYTES)
_OFFSET = struct.Struct(">q")
TopicPartition = tuple[str, int]


class OffsetMap:
    """key -> latest offset in `dedupe_buffer_bytes` of memory, as Kafka's SkimpyOffsetMap:
    an open-addressing table of 24-byte slots (the key's 16-byte MD5, an 8-byte offset) in one
    preallocated buffer, filled to 90%. The memory is exactly the setting, however many or
    large the keys; a digest of all zeros marks an empty slot."""

    def __init__(self, dedupe_buffer_bytes: int) -> None:
        self.slots = dedupe_buffer_bytes // OFFSET_MAP_BYTES_PER_ENTRY
        self.capacity = int(self.slots * OFFSET_MAP_LOAD_FACTOR)
        self._table = bytearray(self.slots * OFFSET_MAP_BYTES_PER_ENTRY)
        self._size = 0
        self.latest_offset = -1  # the last offset of the last batch the map covers

    @staticmethod
    def digest(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def __len__(self) -> int:
        return self._size

    def _slot_of(self, digest: bytes) -> int:
        """The slot holding `digest`, or the empty slot where it would go (linear probing
        from the digest's first 8 bytes)."""
        table, slots = self._table, self.slots
        slot = int.from_bytes(digest[:8], "big") % slots
        while True:
            at = slot * OFFSET_MAP_BYTES_PER_ENTRY
            stored = table[at : at + _DIGEST_BYTES]
            if stored in (digest, _EMPTY_DIGEST):
                return slot
            slot = slot + 1 if slot + 1 < slots else 0

    def get(self, key: bytes) -> int:
        at = self._slot_of(self.digest(key)) * OFFSET_MAP_BYTES_PER_ENTRY
        if self._table[at : at + _DIGEST_BYTES] == _EMPTY_DIGEST:
            return -1
        return int(_OFFSET.unpack_from(self._table, at + _DIGEST_BYTES)[0])

    def put_batch(self, records: Sequence[Record], start_offset: int) -> bool:
        """Add a batch's keyed records at or past `start_offset`; False, adding nothing,
        when they might not fit (a batch is mapped whole or not at all)."""
        keyed = [r for r in records if r.key is not None and r.offset >= start_offset]
        if self._size + len(keyed) > self.capacity:
            return False
        table = self._table
        for record in keyed:
            digest = self.digest(record.key)  # type: ignore[arg-type]
            if digest == _EMPTY_DIGEST:
                continue  # one key in 2**128 hashes to the empty mark; it is not deduplicated
            at = self._slot_of(digest) * OFFSET_MAP_BYTES_PER_ENTRY
            if table[at : at + _DIGEST_BYTES] == _EMPTY_DIGEST:
                table[at : at + _DIGEST_BYTES] = digest
                self._size += 1
            _OFFSET.pack_into(table, at + _DIGEST_BYTES, record.offset)
        return True


@dataclass(frozen=True)
class CleanableRange:
    first_dirty_offset: int
    first_uncleanable_offset: int
    cleanable_bytes: int
    total_bytes: int
    max_compaction_delay_ms: int

    @property
    def dirty_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


class Cleaner:
    def __init__(
        self, *, clock: Clock = SYSTEM_CLOCK, dedupe_buffer_bytes: int = 128 * 1024 * 1024
    ) -> None:
        self.clock = clock
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        # Partitions a pass failed on, with the reason: skipped until they are re-created.
        self.uncleanable: dict[TopicPartition, str] = {}

    # -- choosing what to clean --------------------------------------------------------

    def cleanable_range(self, log: Log) -> CleanableRange:
        now = self.clock.now_ms()
        first_dirty = log.cleaned_up_to_offset
        if not log.log_start_offset <= first_dirty <= log.log_end_offset:
            first_dirty = log.log_start_offset
        segments = log.segments
        non_active_dirty = [
            s
            for i, s in enumerate(segments[:-1])
            if segments[i + 1].base_offset > first_dirty  # holds offsets at or past it
        ]
        uncleanable = segments[-1].base_offset
        unstable = log.producer_state.txns.first_unstable  # Kafka stops at the LSO too
        if unstable is not None:
            uncleanable = min(uncleanable, unstable)
        lag_ms = log.config.min_compaction_lag_ms
        if lag_ms > 0:
            for segment in non_active_dirty:
                if segment.largest_timestamp_ms > now - lag_ms:
                    uncleanable = min(uncleanable, segment.base_offset)
                    break
        uncleanable = max(first_dirty, uncleanable)
        below = [s for s in segments if s.base_offset < uncleanable]
        dirty_bytes = sum(
            s.size
            for i, s in enumerate(below)
            if (below[i + 1].base_offset if i + 1 < len(below) else uncleanable) > first_dirty
        )
        first_batch_times = [
            t for s in non_active_dirty if (t := s.first_batch_timestamp() or 0) > 0
        ]
        delay_ms = 0
        if first_batch_times:
            clean_until_ms = now - log.config.max_compaction_lag_ms
            delay_ms = max(0, clean_until_ms - min(first_batch_times))
        return CleanableRange(
            first_dirty, uncleanable, dirty_bytes, sum(s.size for s in below), delay_ms
        )

    def maybe_clean(self, log: Log) -> int:
        """Clean the log if it is dirty enough or past its max compaction lag; return how
        many segments were rewritten. A failure marks the partition uncleanable."""
        tp = (log.topic, log.partition)
        if tp in self.uncleanable:
            return 0
        try:
            found = self.cleanable_range(log)
            if found.cleanable_bytes == 0 or (
                found.max_compaction_delay_ms == 0
                and found.dirty_ratio <= log.config.min_cleanable_dirty_ratio
            ):
                return 0
            return self.clean(log, found.first_dirty_offset, found.first_uncleanable_offset)
        except Exception as exc:  # any failure must stop this partition only
            self.uncleanable[tp] = str(exc)
            logger.exception(
                "cleaning %s-%d failed; the partition is marked uncleanable and keeps serving",
                *tp,
            )
            return 0

    # -- cleaning ----------------------------------------------------------------------

    def clean(self, log: Log, first_dirty: int, first_uncleanable: int) -> int:
        unstable = log.producer_state.txns.first_unstable
        if unstable is not None:
            first_uncleanable = min(first_uncleanable, max(unstable, first_dirty))
        txns = TxnCleaning(
            log.aborted_transactions(log.log_start_offset, first_uncleanable), log.producer_state
        )
        offset_map = self._build_offset_map(log, first_dirty, first_uncleanable, txns)
        end_offset = txns.end_offset = offset_map.latest_offset + 1
        if end_offset <= first_dirty:
            raise CorruptRecordError(
                f"{log.directory.name}: the offset map ({offset_map.capacity} keys, "
                "log.cleaner.dedupe.buffer.size) cannot hold one batch's keys at offset "
                f"{first_dirty}"
            )
        now_ms = self.clock.now_ms()
        rewritten = 0
        for group in self._group(log, [s for s in log.segments if s.base_offset < end_offset]):
            cleaned = self._clean_group(log, group, offset_map, now_ms, txns)
            log.replace_segments([cleaned] if cleaned is not None else [], group)
            rewritten += len(group)
        log.set_cleaned_up_to(end_offset)
        return rewritten

    def _build_offset_map(
        self, log: Log, first_dirty: int, first_uncleanable: int, txns: TxnCleaning
    ) -> OffsetMap:
        offset_map = OffsetMap(self.dedupe_buffer_bytes)
        for segment in log.segments:
            if segment.base_offset >= first_uncleanable:
                break
            start = segment.offset_index.lookup(first_dirty).position
            for batch in _checked_batches(segment, start):
                h = batch.header
                if h.last_offset < first_dirty:
                    continue
                if h.base_offset >= first_uncleanable:
                    return offset_map
                # Aborted records never supersede a key's committed value (Kafka's cleaner).
                keyed = not h.is_control and txns.aborted_txn(h) is None
                if keyed and not offset_map.put_batch(batch.records(), first_dirty):
                    return offset_map  # full: the next pass goes on from here
                offset_map.latest_offset = h.last_offset
        return offset_map

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
        self,
        log: Log,
        group: Sequence[LogSegment],
        offset_map: OffsetMap,
        now_ms: int,
        txns: TxnCleaning,
    ) -> LogSegment | None:
        cleaned = log.segment_factory.open(group[0].base_offset, log_files.CLEANED_SUFFIX)
        cleaned.make_active()
        try:
            for segment in group:
                for batch in _checked_batches(segment, 0):
                    kept = self._retained(batch, offset_map, now_ms, log, txns)
                    if kept is not None:
                        h = RecordBatch(kept).header
                        cleaned.append(
                            [kept],
                            [AppendedBatch(h.size_in_bytes, h.last_offset, h.max_timestamp)],
                        )
            if cleaned.size == 0:
                cleaned.delete_files()
                return None
            for entry in txns.index_entries([e for s in group for e in s.txn_index.entries]):
                cleaned.txn_index.append(entry)
            cleaned.on_become_inactive()
            cleaned.flush()
            # The old files' mtime carries over: time retention of segments without
            # timestamps falls back to it.
            mtime_ns = os.stat(group[-1].log.path).st_mtime_ns
            os.utime(cleaned.log.path, ns=(mtime_ns, mtime_ns))
            cleaned.change_suffix(log_files.CLEANED_SUFFIX, log_files.SWAP_SUFFIX)
            log_files.fsync_directory(log.directory)
            return cleaned
        except BaseException:
            cleaned.delete_files()
            raise

    @staticmethod
    def _retained(
        batch: RecordBatch, offset_map: OffsetMap, now_ms: int, log: Log, txns: TxnCleaning
    ) -> bytes | None:
        """The batch as it stays after cleaning (possibly the same bytes), or None. Aborted
        data and the markers of transactions with no data left go (cleaner_txn.py)."""
        h = batch.header
        end_offset = txns.end_offset
        # The last batch of the pass, or its producer's last one, stays, emptied if need be.
        kept_empty = h.next_offset == end_offset or txns.keeps_producer_state(h)
        raw = bytes(batch.raw())
        before_end = h.last_offset < end_offset  # what is past the offset map stays
        if h.is_control:
            if not before_end or not txns.marker_may_go(batch):
                return raw
            if h.delete_horizon_ms is None and h.record_count:
                # The horizon starts with the first clean that finds the marker removable.
                return _encode_kept(h, batch.records(), now_ms + log.config.delete_retention_ms)
            if h.delete_horizon_ms is not None and now_ms < h.delete_horizon_ms:
                return raw
            return encode_empty_batch(h) if kept_empty else None
        if before_end and txns.data_read(h):
            return encode_empty_batch(h) if kept_empty else None
        horizon = h.delete_horizon_ms
        keep_tombstones = horizon is None or now_ms < horizon
        records = batch.records()
        kept = [
            r
            for r in records
            if r.offset > offset_map.latest_offset
            or (
                r.key is not None
                and r.offset >= offset_map.get(r.key)
                and (r.value is not None or keep_tombstones)
            )
        ]
        if not kept:
            # Kafka's RETAIN_EMPTY: the pass's last offset, or the producer's state, stays.
            return encode_empty_batch(h) if kept_empty else None
        set_horizon = horizon is None and any(r.value is None for r in kept)
        if len(kept) == len(records) and not set_horizon:
            return raw
        if set_horizon:
            horizon = now_ms + log.config.delete_retention_ms
        return _encode_kept(h, kept, horizon)


def _encode_kept(h: BatchHeader, kept: list[Record], horizon_ms: int | None) -> bytes:
    log_append_time = h.timestamp_type == LOG_APPEND_TIME
    attributes = h.attributes & ~DELETE_HORIZON_MASK
    if horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    return encode_batch(
        kept,
        base_offset=h.base_offset,
        last_offset_delta=h.last_offset_delta,
        compression=h.attributes & COMPRESSION_MASK,
        attributes=attributes,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        partition_leader_epoch=h.partition_leader_epoch,
        # LogAppendTime batches keep their stamp; CreateTime ones take their kept records'.
        max_timestamp=h.max_timestamp if log_append_time else None,
        base_timestamp=horizon_ms,
    )


def _checked_batches(segment: LogSegment, start_position: int) -> Iterator[RecordBatch]:
    """The segment's batches from `start_position`, one read each, CRC-checked."""
    for found in segment.log.batches(start_position):
        batch = RecordBatch(segment.log.read(found.position, found.header.size_in_bytes))
        batch.validate()
        yield batch
