"""Segments copied to the object store the way the copier lays them out (remote_layout.py,
remote_metadata.py), from a partition directory's rolled segments: what the read side's
tests need before a node copies by itself. Each segment's files are uploaded as they are on
disk (the indexes trimmed: rolled segments' are), with the producer snapshot taken at its
end and the leader epochs up to its end, and its metadata recorded COPY_SEGMENT_FINISHED."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

from seglog.storage.leader_epoch_cache import read_epoch_entries
from seglog.storage.remote_layout import (
    LEADER_EPOCH_CHECKPOINT,
    OFFSET_INDEX,
    PRODUCER_SNAPSHOT,
    SEGMENT_LOG,
    TIME_INDEX,
    TXN_INDEX,
    SegmentKey,
    segment_object,
)
from seglog.storage.remote_metadata import (
    COPY_SEGMENT_FINISHED,
    RemoteLogMetadata,
    RemoteSegment,
)
from seglog.storage.remote_store import RemoteStore


def _batches_end(path: Path) -> tuple[int, int]:
    """(last offset, max timestamp) of a .log file, from its batch headers."""
    data = path.read_bytes()
    position, last, max_ts = 0, -1, -1
    while position + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, position)
        (delta,) = struct.unpack_from(">i", data, position + 23)
        (ts,) = struct.unpack_from(">q", data, position + 35)
        last, max_ts = base + delta, max(max_ts, ts)
        position += 12 + length
    return last, max_ts


def copy_rolled_segments(
    store: RemoteStore,
    metadata: RemoteLogMetadata,
    partition_dir: Path,
    topic: str,
    topic_id: str,
    partition: int,
    below: int | None = None,
) -> list[RemoteSegment]:
    """Copy every segment but the active one (and, with `below`, only those ending below
    it); their metadata, in offset order."""
    logs = sorted(partition_dir.glob("*.log"))[:-1]
    copied = []
    for log_file in logs:
        base = int(log_file.stem)
        last, max_ts = _batches_end(log_file)
        if last < base or (below is not None and last >= below):
            continue
        segment_id = str(uuid.uuid4())
        key = SegmentKey(topic, topic_id, partition, base, segment_id)
        store.put_file(segment_object(key, SEGMENT_LOG), log_file)
        store.put_file(segment_object(key, OFFSET_INDEX), log_file.with_suffix(".index"))
        store.put_file(segment_object(key, TIME_INDEX), log_file.with_suffix(".timeindex"))
        store.put_bytes(segment_object(key, TXN_INDEX), b"")
        # The producer state at the segment's end (the snapshot its roll took), and the
        # leader epochs up to its end.
        snapshot = partition_dir / f"{last + 1:020d}.snapshot"
        store.put_bytes(
            segment_object(key, PRODUCER_SNAPSHOT),
            snapshot.read_bytes() if snapshot.exists() else b"",
        )
        epochs = read_epoch_entries(partition_dir / "leader-epoch-checkpoint")
        epochs = [e for e in epochs if e.start_offset <= last]
        checkpoint = "\n".join(["0", str(len(epochs)), *(f"{e} {o}" for e, o in epochs)])
        store.put_bytes(segment_object(key, LEADER_EPOCH_CHECKPOINT), checkpoint.encode() + b"\n")
        segment = RemoteSegment(
            topic_id=topic_id,
            partition=partition,
            segment_id=segment_id,
            base_offset=base,
            end_offset=last,
            max_timestamp_ms=max_ts,
            size_bytes=log_file.stat().st_size,
            leader_epochs=tuple((e, o) for e, o in epochs),
            state=COPY_SEGMENT_FINISHED,
            topic=topic,
        )
        copied.append(metadata.record(segment))
    return copied
