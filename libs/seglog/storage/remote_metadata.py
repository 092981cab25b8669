"""Kafka's remote log segment metadata (KIP-405's RemoteLogSegmentMetadata) and where it is kept.

Each copied segment has one metadata record: its id (a uuid), offsets, max timestamp, size,
the leader epochs its batches carry (epoch -> first offset in the segment) and a state:

    COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED
        -> DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED

Readers see only COPY_SEGMENT_FINISHED segments (`segments`, `segment_for`): a STARTED copy may
be missing objects, a DELETE_SEGMENT_STARTED one may have lost some already.

Where it is kept: in the object store itself, one small JSON object per segment under
`__remote_log_metadata/<topic_id>/<partition>/` (remote_layout.py), rewritten on each state
change (an S3 PUT replaces an object atomically). Why not a `__remote_log_metadata` topic as
Kafka's default TopicBasedRemoteLogMetadataManager, nor the registry:
- The metadata then has exactly the durability and reach of the data it describes. Whoever can
  read the segments can read the list of them with the same credentials and no broker: a node
  whose disk was wiped, and Spark's executors, which plan a read of a tiered topic from the
  store alone. A topic would need consumers on every node and a replay at start; the registry
  would put one change record per segment per state through the controller's metadata log,
  which every gateway and node applies (O(segments) everywhere, for data only a partition's
  replicas and readers care about).
- Ordering is the copier's: FINISHED is written after every object of the segment is in the
  store, DELETE_SEGMENT_STARTED before the first object is deleted. A crash between steps
  leaves a STARTED record whose objects the next leader deletes (never a FINISHED record with
  missing objects).
- One writer per partition: its leader's copier. A deposed leader's late write is harmless: the
  segment id is fresh per attempt, so it can only add a duplicate copy of offsets, which
  readers skip (`_visible`).
Cost: one LIST per partition per `cache_ms` for readers (cached; writes go through the cache;
a refresh GETs only the records whose ETag changed), one PUT per state change (4 per segment
over its life).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, replace

from ..errors import SeglogError
from .remote_layout import (
    SegmentKey,
    log_start_object,
    metadata_object,
    metadata_partition_prefix,
)
from .remote_store import RemoteObjectNotFoundError, RemoteStore

COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"
STATES = (
    COPY_SEGMENT_STARTED,
    COPY_SEGMENT_FINISHED,
    DELETE_SEGMENT_STARTED,
    DELETE_SEGMENT_FINISHED,
)
# Kafka's allowed transitions (RemoteLogSegmentState.isValidTransition).
_NEXT = {
    COPY_SEGMENT_STARTED: {COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED},
    COPY_SEGMENT_FINISHED: {DELETE_SEGMENT_STARTED},
    DELETE_SEGMENT_STARTED: {DELETE_SEGMENT_FINISHED},
    DELETE_SEGMENT_FINISHED: set(),
}
# A metadata object is a few hundred bytes; anything past this is not ours.
_MAX_METADATA_BYTES = 64 * 1024


@dataclass(frozen=True)
class RemoteSegment:
    topic_id: str
    partition: int
    segment_id: str
    base_offset: int
    end_offset: int  # the last offset in the segment (inclusive), as Kafka's
    max_timestamp_ms: int
    size_bytes: int
    leader_epochs: tuple[tuple[int, int], ...]  # (epoch, first offset of it in the segment)
    state: str
    topic: str = ""  # the name, for the data objects' prefix (remote_layout.segment_prefix)
    event_time_ms: int = 0  # when the state was recorded (Kafka's eventTimestampMs)
    broker_id: int = -1  # the node that recorded it

    @property
    def key(self) -> SegmentKey:
        return SegmentKey(
            self.topic, self.topic_id, self.partition, self.base_offset, self.segment_id
        )

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes) -> RemoteSegment:
        try:
            raw = json.loads(data)
            seg = RemoteSegment(
                topic_id=str(raw["topic_id"]),
                partition=int(raw["partition"]),
                segment_id=str(raw["segment_id"]),
                base_offset=int(raw["base_offset"]),
                end_offset=int(raw["end_offset"]),
                max_timestamp_ms=int(raw["max_timestamp_ms"]),
                size_bytes=int(raw["size_bytes"]),
                leader_epochs=tuple((int(e), int(o)) for e, o in raw["leader_epochs"]),
                state=str(raw["state"]),
                topic=str(raw.get("topic", "")),
                event_time_ms=int(raw.get("event_time_ms", 0)),
                broker_id=int(raw.get("broker_id", -1)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SeglogError(f"malformed remote log segment metadata: {exc}") from None
        if seg.state not in STATES:
            raise SeglogError(f"unknown remote segment state {seg.state!r}")
        return seg


class RemoteLogMetadata:
    """The metadata of every remote segment, read from and written to the object store, with a
    per-partition cache that readers refresh at most every `cache_ms` (writers go through it)."""

    def __init__(self, store: RemoteStore, *, cache_ms: int = 1000, broker_id: int = -1) -> None:
        self.store = store
        self.cache_ms = cache_ms
        self.broker_id = broker_id
        self._lock = threading.Lock()
        # (topic_id, partition) -> (loaded at, monotonic s; segment id -> record)
        self._cache: dict[tuple[str, int], tuple[float, dict[str, RemoteSegment]]] = {}
        # metadata object key -> (its ETag, its record): a refresh GETs only what changed.
        self._known: dict[str, tuple[str, RemoteSegment]] = {}
        # (topic_id, partition) -> (the log-start-offset object's ETag, the offset): the log
        # start DeleteRecords set (0 when it never did).
        self._floors: dict[tuple[str, int], tuple[str, int]] = {}

    # ---- reads
    def all_segments(
        self, topic_id: str, partition: int, *, fresh: bool = False
    ) -> list[RemoteSegment]:
        """Every record of the partition, in any state, by base offset then start time."""
        return sorted(
            self._records(topic_id, partition, fresh).values(),
            key=lambda s: (s.base_offset, s.event_time_ms, s.segment_id),
        )

    def copied_segments(self, topic_id: str, partition: int) -> list[RemoteSegment]:
        """The finished segments, ordered by base offset, without overlaps (a duplicate copy
        of the same offsets by a deposed leader is skipped), DeleteRecords' below included."""
        return _visible(self.all_segments(topic_id, partition))

    def segments(self, topic_id: str, partition: int) -> list[RemoteSegment]:
        """The readable segments: the copied ones holding offsets at or past the log start
        DeleteRecords set (the first may start below it: `log_start_offset` says where)."""
        floor = self.log_start_floor(topic_id, partition)
        return [s for s in self.copied_segments(topic_id, partition) if s.end_offset >= floor]

    def log_start_floor(self, topic_id: str, partition: int) -> int:
        """The log start DeleteRecords set for the partition (0: never)."""
        self._records(topic_id, partition, False)
        with self._lock:
            return self._floors.get((topic_id, partition), ("", 0))[1]

    def segment_for(self, topic_id: str, partition: int, offset: int) -> RemoteSegment | None:
        """The finished segment holding `offset`; or, when `offset` falls between two segments
        (a gap left by a compacted-away batch), the next one after it. None below the remote
        log start or past the remote end."""
        segs = self.segments(topic_id, partition)
        start = self.log_start_offset(topic_id, partition)
        if not segs or start is None or offset < start:
            return None
        for seg in segs:
            if seg.end_offset >= offset:
                return seg
        return None

    def log_start_offset(self, topic_id: str, partition: int) -> int | None:
        segs = self.segments(topic_id, partition)
        if not segs:
            return None
        return max(segs[0].base_offset, self.log_start_floor(topic_id, partition))

    def remote_end_offset(self, topic_id: str, partition: int) -> int | None:
        """The last offset held remotely (inclusive), as Kafka's highestOffsetInRemoteStorage."""
        segs = self.copied_segments(topic_id, partition)
        return segs[-1].end_offset if segs else None

    def set_log_start_offset(self, topic_id: str, partition: int, offset: int) -> int:
        """DeleteRecords on a tiered partition: the log start moves to `offset` (never back);
        readers answer OFFSET_OUT_OF_RANGE below it, and remote retention deletes the
        segments wholly below it. Returns the log start floor now."""
        current = self.log_start_floor(topic_id, partition)
        if offset <= current:
            return current
        key = log_start_object(topic_id, partition)
        etag = self.store.put_bytes(key, json.dumps({"log_start_offset": offset}).encode())
        with self._lock:
            self._floors[(topic_id, partition)] = (etag, offset)
        return offset

    def deleted_end_offset(self, topic_id: str, partition: int) -> int | None:
        """The last offset of the newest segment remote retention deleted (or is deleting)."""
        ends = [
            s.end_offset
            for s in self.all_segments(topic_id, partition)
            if s.state in (DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED)
        ]
        return max(ends) if ends else None

    # ---- writes (the leader's copier and retention)
    def record(self, segment: RemoteSegment) -> RemoteSegment:
        """Write a new record (COPY_SEGMENT_STARTED) or a state change of an existing one."""
        with self._lock:
            entry = self._cache.get((segment.topic_id, segment.partition))
            old = entry[1].get(segment.segment_id) if entry else None
        if old is not None and segment.state != old.state and segment.state not in _NEXT[old.state]:
            raise SeglogError(
                f"remote segment {segment.segment_id}: {old.state} -> {segment.state} is not a "
                "valid transition"
            )
        stamped = replace(segment, event_time_ms=int(time.time() * 1000), broker_id=self.broker_id)
        key = metadata_object(
            segment.topic_id, segment.partition, segment.base_offset, segment.segment_id
        )
        etag = self.store.put_bytes(key, stamped.to_json())
        with self._lock:
            self._known[key] = (etag, stamped)
            entry = self._cache.get((segment.topic_id, segment.partition))
            if entry is not None:
                entry[1][segment.segment_id] = stamped
        return stamped

    def transition(self, segment: RemoteSegment, state: str) -> RemoteSegment:
        if state not in _NEXT[segment.state]:
            raise SeglogError(f"remote segment {segment.segment_id}: {segment.state} -> {state}")
        return self.record(replace(segment, state=state))

    def forget(self, segment: RemoteSegment) -> None:
        """Remove a record (a topic's deletion, after its objects are gone)."""
        key = metadata_object(
            segment.topic_id, segment.partition, segment.base_offset, segment.segment_id
        )
        self.store.delete([key])
        with self._lock:
            self._known.pop(key, None)
            entry = self._cache.get((segment.topic_id, segment.partition))
            if entry is not None:
                entry[1].pop(segment.segment_id, None)

    def invalidate(self, topic_id: str, partition: int) -> None:
        with self._lock:
            self._cache.pop((topic_id, partition), None)

    # ---- the cache
    def _records(self, topic_id: str, partition: int, fresh: bool) -> dict[str, RemoteSegment]:
        now = time.monotonic()
        with self._lock:
            entry = self._cache.get((topic_id, partition))
            if entry is not None and not fresh and now - entry[0] < self.cache_ms / 1000:
                return dict(entry[1])
        loaded = self._load(topic_id, partition)
        with self._lock:
            self._cache[(topic_id, partition)] = (now, dict(loaded))
        return loaded

    def _load(self, topic_id: str, partition: int) -> dict[str, RemoteSegment]:
        prefix = metadata_partition_prefix(topic_id, partition)
        listed = self.store.list_etags(prefix)
        records: dict[str, RemoteSegment] = {}
        self._load_floor(topic_id, partition, listed)
        for key, etag in sorted(listed.items()):
            if not key.endswith(".json"):
                continue
            with self._lock:
                known = self._known.get(key)
            if known is not None and etag and known[0] == etag:
                records[known[1].segment_id] = known[1]
                continue
            try:
                data = self.store.get(key)
            except RemoteObjectNotFoundError:
                continue  # deleted between the LIST and the GET (a topic's deletion)
            if len(data) > _MAX_METADATA_BYTES:
                raise SeglogError(f"remote metadata object {key!r} is {len(data)} bytes")
            seg = RemoteSegment.from_json(data)
            records[seg.segment_id] = seg
            with self._lock:
                self._known[key] = (etag, seg)
        with self._lock:  # records gone from the store leave the memo too
            for key in [k for k in self._known if k.startswith(prefix) and k not in listed]:
                del self._known[key]
        return records

    def _load_floor(self, topic_id: str, partition: int, listed: dict[str, str]) -> None:
        key = log_start_object(topic_id, partition)
        etag = listed.get(key)
        with self._lock:
            known = self._floors.get((topic_id, partition))
        if etag is None:
            floor = ("", 0)
        elif known is not None and known[0] == etag:
            return
        else:
            try:
                data = self.store.get(key)
                floor = (etag, int(json.loads(data)["log_start_offset"]))
            except RemoteObjectNotFoundError:
                floor = ("", 0)
            except (ValueError, KeyError, TypeError) as exc:
                raise SeglogError(f"malformed remote log start object {key!r}: {exc}") from None
        with self._lock:
            self._floors[(topic_id, partition)] = floor


def _visible(records: list[RemoteSegment]) -> list[RemoteSegment]:
    """FINISHED records, by base offset, each reaching past the previous one's end. Two may
    overlap: a new leader whose local segments were rolled at other offsets than its
    predecessor's copies the one straddling the remote end whole (as Kafka's copier does); a
    reader of an offset in the overlap reads the earlier one. A copy adding nothing past the
    previous end (a deposed leader's duplicate) is skipped."""
    out: list[RemoteSegment] = []
    for seg in records:
        if seg.state != COPY_SEGMENT_FINISHED:
            continue
        if out and seg.end_offset <= out[-1].end_offset:
            continue
        out.append(seg)
    return out
