"""Copying one partition's rolled segments to the object store (Kafka's RLMCopyTask).

A segment is copied when it is no longer the active one and every offset in it is below the
last stable offset (committed: no truncation can take it back, and no open transaction's
abort can still add to its transaction index), starting after the highest offset
the store already holds, so a new leader continues where its predecessor stopped instead of
copying again (its metadata is shared through the store, remote_metadata.py). For each:

1. record COPY_SEGMENT_STARTED with a fresh segment id (a uuid);
2. upload the files (remote_layout.SEGMENT_FILES): indexes, transaction index, producer
   snapshot and leader-epoch checkpoint first, the segment's log last;
3. record COPY_SEGMENT_FINISHED, and only then raise the log's
   `highest_offset_in_remote_storage`, which lets local retention delete it (retention.py).

A failure at any step leaves the local segment in place and the STARTED record behind; the
next attempt copies under a new id, and the leftover's objects are deleted when its
partition's leader next finds it (`clean_up_failed`). Segments are uploaded whole, one PUT
per file: segment.bytes (1 GiB at most, Kafka's default) is within S3's 5 GiB single PUT.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path

from seglog.storage.leader_epoch_cache import EpochEntry
from seglog.storage.log import Log
from seglog.storage.remote_layout import (
    LEADER_EPOCH_CHECKPOINT,
    OFFSET_INDEX,
    PRODUCER_SNAPSHOT,
    SEGMENT_LOG,
    TIME_INDEX,
    TXN_INDEX,
    SegmentKey,
    segment_object,
    segment_objects,
)
from seglog.storage.remote_metadata import (
    COPY_SEGMENT_FINISHED,
    COPY_SEGMENT_STARTED,
    DELETE_SEGMENT_FINISHED,
    DELETE_SEGMENT_STARTED,
    RemoteLogMetadata,
    RemoteSegment,
)
from seglog.storage.remote_store import RemoteStore
from seglog.storage.segment import LogSegment

logger = logging.getLogger(__name__)


def segment_epochs(entries: list[EpochEntry], base: int, end: int) -> tuple[tuple[int, int], ...]:
    """The epochs whose batches may lie in [base, end]: the one in force at `base` (starting
    at `base`) and every one starting inside (Kafka's segmentLeaderEpochs)."""
    out: list[tuple[int, int]] = []
    for entry in entries:
        if entry.start_offset <= base:
            out = [(entry.epoch, base)]
        elif entry.start_offset <= end:
            out.append((entry.epoch, entry.start_offset))
    return tuple(out)


def epoch_checkpoint_text(entries: list[EpochEntry], end: int) -> bytes:
    """Kafka's leader-epoch-checkpoint (leader_epoch_cache.py's format) cut after `end`."""
    kept = [e for e in entries if e.start_offset <= end]
    lines = ["0", str(len(kept)), *(f"{e.epoch} {e.start_offset}" for e in kept)]
    return ("\n".join(lines) + "\n").encode()


def copy_candidates(log: Log) -> list[tuple[LogSegment, int]]:
    """(segment, its last offset) for each rolled segment wholly below the last stable
    offset (the high watermark, or the first offset of the oldest open transaction: as
    Kafka's copier, so a copied segment's transaction index is final), holding offsets
    past what the store has."""
    copied_end = log.highest_offset_in_remote_storage
    segments = log.segments
    stable = log.last_stable_offset
    out = []
    for segment, following in zip(segments, segments[1:], strict=False):
        end = following.base_offset - 1
        if end >= stable:
            break
        if end <= copied_end or segment.size == 0:
            continue
        out.append((segment, end))
    return out


def copy_lag(log: Log) -> tuple[int, int]:
    """Kafka's RemoteCopyLagBytes and RemoteCopyLagSegments (KIP-963): the bytes and
    segments that could be copied and are not yet (local state only: no store call, so it
    reads the same while the store is down, when it grows)."""
    candidates = copy_candidates(log)
    return sum(segment.size for segment, _ in candidates), len(candidates)


class PartitionCopier:
    """Copies and cleans up one partition's segments; stateless between calls (every pass
    starts from the metadata), so leadership may move between passes."""

    def __init__(
        self,
        store: RemoteStore,
        metadata: RemoteLogMetadata,
        *,
        still_leading: Callable[[], bool],
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.still_leading = still_leading

    def candidates(self, log: Log) -> list[tuple[LogSegment, int]]:
        return copy_candidates(log)

    def copy(self, topic: str, topic_id: str, log: Log, segment: LogSegment, end: int) -> None:
        entries = list(log.leader_epochs.entries)
        record = RemoteSegment(
            topic_id=topic_id,
            partition=log.partition,
            segment_id=str(uuid.uuid4()),
            base_offset=segment.base_offset,
            end_offset=end,
            max_timestamp_ms=segment.max_timestamp_so_far,
            size_bytes=segment.size,
            leader_epochs=segment_epochs(entries, segment.base_offset, end),
            state=COPY_SEGMENT_STARTED,
            topic=topic,
        )
        started = self.metadata.record(record)
        key = started.key
        self._upload(key, OFFSET_INDEX, segment.offset_index.path)
        self._upload(key, TIME_INDEX, segment.time_index.path)
        self._upload(key, TXN_INDEX, segment.txn_index.path)
        self._upload(key, PRODUCER_SNAPSHOT, log.producer_state.snapshot_path(end + 1))
        self.store.put_bytes(
            segment_object(key, LEADER_EPOCH_CHECKPOINT), epoch_checkpoint_text(entries, end)
        )
        self.store.put_file(segment_object(key, SEGMENT_LOG), segment.log.path)
        if not self.still_leading():
            # Deposed while uploading: the new leader copies these offsets itself; finishing
            # here could only add a duplicate it then also holds.
            logger.info("%s-%d: leadership moved during a copy; left unfinished", topic, end)
            return
        self.metadata.transition(started, COPY_SEGMENT_FINISHED)
        log.highest_offset_in_remote_storage = max(log.highest_offset_in_remote_storage, end)
        logger.info(
            "%s-%d: copied segment %d-%d (%d bytes) to the object store as %s",
            topic, log.partition, segment.base_offset, end, segment.size, started.segment_id,
        )  # fmt: skip

    def _upload(self, key: SegmentKey, name: str, path: Path) -> None:
        """A file that is not there (an index never written, no transaction index, a
        snapshot retention removed) is uploaded empty, so every segment has every object."""
        full = segment_object(key, name)
        if path.exists():
            self.store.put_file(full, path)
        else:
            self.store.put_bytes(full, b"")

    def clean_up_failed(self, topic_id: str, partition: int) -> None:
        """Delete the objects of copies that never finished (a crash, a store error, a
        deposed leader) and finish deletions that were cut short. Called by the leader between
        its own copies, which run one at a time on its one thread: no STARTED copy is its own."""
        for seg in self.metadata.all_segments(topic_id, partition):
            if seg.state in (COPY_SEGMENT_STARTED, DELETE_SEGMENT_STARTED):
                self.delete(seg)

    def delete(self, seg: RemoteSegment) -> RemoteSegment:
        """Kafka's deletion: DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED."""
        if seg.state != DELETE_SEGMENT_STARTED:
            seg = self.metadata.transition(seg, DELETE_SEGMENT_STARTED)
        self.store.delete(segment_objects(seg.key))
        return self.metadata.transition(seg, DELETE_SEGMENT_FINISHED)
