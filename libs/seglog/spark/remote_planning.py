"""Planning a batch read of a tiered topic straight from the object store (KIP-405's remote
segments, read by Spark's executors without the brokers): the part of each partition's range
below its local log start is cut into tasks over the copied segments, the rest is left to the
cluster's planning (planning.py).

What the plan reads, per partition: the local log start (ListOffsets EARLIEST_LOCAL, -4),
asked before the remote segments are listed, so every offset below it is in a listed segment
(a node deletes a local segment only after its copy is FINISHED); then the partition's
metadata records (remote_metadata.py, one LIST and a GET per new record) and, for each
segment the range touches, its offset index (one GET of 8 bytes per 4 KiB of segment).

Tasks are cut by bytes as the cluster's SplitPoints cuts them: at offset index entries, about
`max_bytes_per_task` each; a task may span several small segments. An index entry
(last offset L of the batch at position P) gives a cut at L + 1: the task before it reads
up to the next entry's position (where a batch past L starts), the task after it starts
reading at P and skips that one batch.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from ..client.gateway import GatewayClient
from ..client.structs import TopicPartition
from ..rpc.status import error_from_code
from ..storage.log_reading import EARLIEST_LOCAL_TIMESTAMP
from ..storage.remote_indexes import RemoteIndexes
from ..storage.remote_layout import OFFSET_INDEX, segment_object
from ..storage.remote_metadata import RemoteLogMetadata, RemoteSegment
from ..storage.remote_store import RemoteStorageConfig
from .planning import ReadTask, list_offsets, report_data_loss
from .reading import RangeRead
from .remote_reading import RemoteRangeRead, SegmentPiece, store_for

logger = logging.getLogger(__name__)

# Store requests the planner has in flight at once (partitions, and index GETs).
PLANNING_GETS_IN_FLIGHT = 8
# A partition's last task is kept apart only from this fraction of max_bytes_per_task on.
SMALLEST_TASK_PARTS = 4


@dataclass(frozen=True)
class RemotePlan:
    """Tasks reading from the store, and what is left for the cluster: {tp: (start, end)}."""

    tasks: list[RemoteRangeRead]
    rest: dict[TopicPartition, tuple[int, int]]


def plan_remote(
    client: GatewayClient,
    storage: RemoteStorageConfig,
    ranges: Mapping[TopicPartition, tuple[int, int]],
    max_bytes_per_task: int,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
) -> RemotePlan:
    wanted = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return RemotePlan([], dict(ranges))
    local_starts = list_offsets(client, {tp: EARLIEST_LOCAL_TIMESTAMP for tp in wanted})
    below = {tp: r for tp, r in wanted.items() if r[0] < local_starts[tp]}
    rest = dict(ranges)
    if not below:
        return RemotePlan([], rest)
    topic_ids = _topic_ids(client, {tp.topic for tp in below})
    metadata = _metadata_for(storage)
    cut = _PartitionPlanner(
        metadata, storage, max_bytes_per_task, include_headers, fail_on_data_loss
    )
    # Partitions planned side by side, each with its index GETs in flight together: the
    # plan's requests are round trips to the store (a LIST, a GET per metadata record and
    # per segment's index), which one after another made planning grow with the segments.
    with (
        ThreadPoolExecutor(PLANNING_GETS_IN_FLIGHT, thread_name_prefix="seglog-plan") as parts,
        ThreadPoolExecutor(PLANNING_GETS_IN_FLIGHT, thread_name_prefix="seglog-index") as gets,
    ):
        planned = [
            parts.submit(cut.partition, tp, r, local_starts[tp], topic_ids.get(tp.topic, ""), gets)
            for tp, r in sorted(below.items())
        ]
        tasks: list[RemoteRangeRead] = []
        for (tp, _), future in zip(sorted(below.items()), planned, strict=True):
            found = future.result()
            if found is not None:
                tasks += found.tasks
                rest[tp] = found.rest
    return RemotePlan(tasks, rest)


def fold_tails(
    remote: list[RemoteRangeRead],
    cluster: list[ReadTask],
    max_bytes_per_task: int,
    min_tasks: int | None,
    as_read: Callable[[ReadTask], RangeRead],
) -> tuple[list[RemoteRangeRead], list[ReadTask]]:
    """A partition's local tail, when it is one small cluster task right after the partition's
    last store task, joins that task (read after its pieces, remote_reading.py): a task of
    its own cost Spark a task's start on every partition (measured: a fifth of the direct
    read's tasks on the bench, each a few MiB). Small means below the quarter of
    max_bytes_per_task a last store task joins the one before it under; a tail cut into
    several tasks stays as it is, and so does every tail minPartitions asks to keep."""
    last = {(t.topic, t.partition): i for i, t in enumerate(remote)}
    per_partition = Counter((t.topic, t.partition) for t in cluster)
    spare = len(remote) + len(cluster) - (min_tasks or 0)
    folded = list(remote)
    kept = []
    for task in cluster:
        at = last.get((task.topic, task.partition))
        if (
            at is not None
            and spare > 0
            and per_partition[(task.topic, task.partition)] == 1
            and folded[at].end == task.start
            and task.size_bytes < max_bytes_per_task // SMALLEST_TASK_PARTS
        ):
            folded[at] = replace(folded[at], end=task.end, tail=as_read(task))
            spare -= 1
        else:
            kept.append(task)
    return folded, kept


@dataclass(frozen=True)
class _PartitionTasks:
    tasks: list[RemoteRangeRead]
    rest: tuple[int, int]  # what the cluster reads


@dataclass(frozen=True)
class _PartitionPlanner:
    metadata: RemoteLogMetadata
    storage: RemoteStorageConfig
    max_bytes_per_task: int
    include_headers: bool
    fail_on_data_loss: bool

    def partition(
        self,
        tp: TopicPartition,
        wanted: tuple[int, int],
        local_start: int,
        topic_id: str,
        gets: ThreadPoolExecutor,
    ) -> _PartitionTasks | None:
        """One partition's tasks over its copied segments; None when the cluster reads it
        all (not tiered, or nothing copied yet, or nothing below the local log start)."""
        start, end = wanted
        metadata = self.metadata
        segments = metadata.segments(topic_id, tp.partition) if topic_id else []
        if not segments:
            return None
        stop = min(end, local_start, segments[-1].end_offset + 1)
        # The first segment's base, or past it the log start DeleteRecords set.
        first = metadata.log_start_offset(topic_id, tp.partition)
        first = segments[0].base_offset if first is None else first
        if start < first:
            report_data_loss(
                f"{tp.topic}-{tp.partition}: offsets [{start}, {first}) were to be read but the "
                f"log now starts at {first}",
                self.fail_on_data_loss,
            )
            start = min(first, end)
        if stop <= start:
            return None
        read = []
        for segment, low in _effective(segments):
            first, last = max(low, start), min(segment.end_offset, stop - 1)
            if first <= last:
                read.append((segment, gets.submit(_indexes, metadata, segment), first, last + 1))
        cutter = _Cutter(
            tp, self.storage, self.max_bytes_per_task, self.include_headers, self.fail_on_data_loss
        )
        for segment, indexes, first, end_offset in read:
            cutter.add(segment, indexes.result(), first, end_offset)
        return _PartitionTasks(cutter.finish(), (stop, end))


def _topic_ids(client: GatewayClient, topics: set[str]) -> dict[str, str]:
    out = {}
    for described in client.describe_topics(sorted(topics)):
        if described.error:
            raise error_from_code(described.error, described.error_message)
        out[described.name] = described.topic_id
    return out


def _effective(segments: list[RemoteSegment]) -> list[tuple[RemoteSegment, int]]:
    """Each readable segment with the first offset it is read for: two may overlap (a new
    leader's copy of a segment straddling its predecessor's last), and an offset in the
    overlap is read from the earlier one, as the brokers read it (remote_metadata._visible)."""
    out = []
    reached = -1
    for segment in segments:
        out.append((segment, max(segment.base_offset, reached + 1)))
        reached = segment.end_offset
    return out


# What the planner learnt of the store, kept across plans in its process (Spark reuses its
# planner's Python process, and a job planned again re-read every metadata record and
# offset index: two GETs per segment, ~0.1-0.2 s of a ~1.5 s job on the bench's 256 MiB).
# Metadata is listed afresh on every plan (cache_ms=0: a plan sees every copy finished
# before it) and a record is read again only when its ETag changed; a copied segment's
# offset index never changes (a segment id names one copy), so it is kept as it is, up to
# INDEX_CACHE_BYTES, least recently used out first.
INDEX_CACHE_BYTES = 32 * 1024 * 1024
_metadata: dict[RemoteStorageConfig, RemoteLogMetadata] = {}
_index_cache: OrderedDict[str, RemoteIndexes] = OrderedDict()
_index_bytes = [0]  # what _index_cache holds
_cache_lock = threading.Lock()


def _metadata_for(storage: RemoteStorageConfig) -> RemoteLogMetadata:
    with _cache_lock:
        found = _metadata.get(storage)
        if found is None:
            found = _metadata[storage] = RemoteLogMetadata(store_for(storage), cache_ms=0)
        return found


def _indexes(metadata: RemoteLogMetadata, segment: RemoteSegment) -> RemoteIndexes:
    key = segment_object(segment.key, OFFSET_INDEX)
    with _cache_lock:
        found = _index_cache.get(key)
        if found is not None:
            _index_cache.move_to_end(key)
            return found
    found = RemoteIndexes(segment.base_offset, metadata.store.get(key), b"")
    with _cache_lock:
        if key not in _index_cache:  # (another plan's thread may have read it meanwhile)
            _index_cache[key] = found
            _index_bytes[0] += found.size
        while _index_bytes[0] > INDEX_CACHE_BYTES and len(_index_cache) > 1:
            _index_bytes[0] -= _index_cache.popitem(last=False)[1].size
    return found


class _Cutter:
    """Builds one partition's tasks, segment piece by segment piece."""

    def __init__(
        self,
        tp: TopicPartition,
        storage: RemoteStorageConfig,
        max_bytes: int,
        include_headers: bool,
        fail_on_data_loss: bool,
    ) -> None:
        self.tp = tp
        self.storage = storage
        self.max_bytes = max(1, max_bytes)
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.tasks: list[RemoteRangeRead] = []
        self.pieces: list[SegmentPiece] = []
        self.bytes = 0

    def add(self, segment: RemoteSegment, indexes: RemoteIndexes, first: int, end: int) -> None:
        """Offsets [first, end) of `segment`, cut where the task's bytes reach max_bytes."""
        entries = indexes.offset_entries
        position = indexes.position_at_or_before(first)
        while True:
            room = self.max_bytes - self.bytes
            cut = _cut_after(indexes, entries, position + room, first, end)
            if cut is None:  # the rest of the segment's range fits this task
                bound = _bound(indexes, entries, end, segment.size_bytes)
                self._piece(segment, first, end, position, bound)
                return
            offset, cut_position, resume_position = cut
            self._piece(segment, first, offset, position, cut_position)
            self._close()
            first, position = offset, resume_position

    def _piece(self, segment: RemoteSegment, first: int, end: int, start: int, bound: int) -> None:
        self.pieces.append(SegmentPiece(segment.key, first, end, start, bound))
        self.bytes += bound - start

    def _close(self) -> None:
        if self.pieces:
            self.tasks.append(
                RemoteRangeRead(
                    self.storage,
                    self.tp.topic,
                    self.tp.partition,
                    self.pieces[0].start_offset,
                    self.pieces[-1].end_offset,
                    tuple(self.pieces),
                    self.include_headers,
                    self.fail_on_data_loss,
                )
            )
        self.pieces, self.bytes = [], 0

    def finish(self) -> list[RemoteRangeRead]:
        # A last task of a few batches (a segment's bytes just past a multiple of the task
        # size) costs Spark a task's start for nothing: it joins the task before it.
        if self.tasks and self.pieces and self.bytes < self.max_bytes // SMALLEST_TASK_PARTS:
            before = self.tasks.pop()
            self.pieces = [*before.pieces, *self.pieces]
        self._close()
        return self.tasks


def _cut_after(
    indexes: RemoteIndexes, entries: int, position: int, first: int, end: int
) -> tuple[int, int, int] | None:
    """The first cut at or past file `position` inside (first, end): (the cut offset L + 1,
    where the task before it stops reading, where the task after it starts reading); None
    when no index entry gives one."""
    lo, hi = 0, entries
    while lo < hi:  # the first entry at or past `position`
        mid = (lo + hi) // 2
        if indexes.offset_entry(mid)[1] < position:
            lo = mid + 1
        else:
            hi = mid
    for k in range(lo, entries - 1):  # the last entry has no next one to stop at
        last, at = indexes.offset_entry(k)
        if last + 1 >= end:
            return None
        if last + 1 > first:
            return last + 1, indexes.offset_entry(k + 1)[1], at
    return None


def _bound(indexes: RemoteIndexes, entries: int, end: int, size_bytes: int) -> int:
    """A file position past every batch holding an offset below `end`: the one after the
    first entry reaching `end` (that entry's batch may still hold end - 1)."""
    lo, hi = 0, entries
    while lo < hi:
        mid = (lo + hi) // 2
        if indexes.offset_entry(mid)[0] < end:
            lo = mid + 1
        else:
            hi = mid
    if lo + 1 < entries:
        return indexes.offset_entry(lo + 1)[1]
    return size_bytes
