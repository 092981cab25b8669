"""A follower (a new replica, or a node whose disk was replaced) whose leader's local log
starts past its own log end, on a tiered topic: it does not copy the history the object store
holds, it starts at the leader's local log start with the state that history leaves behind,
read from the copied files of the remote segment ending just below that offset (Kafka's
OFFSET_MOVED_TO_TIERED_STORAGE handling, ReplicaFetcherTierStateMachine /
buildRemoteLogAuxState): its `leader-epoch.checkpoint` (the epochs up to there) and its
`producer.snapshot` (the idempotent producers' state at that offset). Without them a node
that took over would refuse the next batch of a producer whose last write was tiered
(an unknown producer with a sequence past 0) and answer leader-epoch lookups from an empty
cache.

The leader answers such a fetch OFFSET_OUT_OF_RANGE, as for an untiered log; the follower
asks its leader's log ends (follower_truncation.py) and takes this path when its log ends
below the leader's start and the topic is tiered. It runs on the replica fetcher's thread,
as Kafka's does: the store's calls are bounded by the store's own timeouts (remote_store.py);
a failure leaves the log as it was and the fetcher backs off and asks again. When no copied
segment ends just below the start (nothing was copied there, or it was deleted), it starts
without that state, as an untiered follower does."""

from __future__ import annotations

import logging

from seglog.storage import Log
from seglog.storage.leader_epoch_cache import EpochEntry, parse_epoch_entries
from seglog.storage.remote_layout import (
    LEADER_EPOCH_CHECKPOINT,
    PRODUCER_SNAPSHOT,
    SegmentKey,
    segment_object,
)
from seglog.storage.remote_metadata import RemoteSegment

from .fetch_reads import tiered
from .remote_fetches import RemoteFetches

logger = logging.getLogger(__name__)


def start_at_leader_start(
    remote: RemoteFetches | None, log: Log, topic: str, partition: int, start: int
) -> None:
    """Start `log` empty at `start`, with the tiered state below it when there is one."""
    epochs: list[EpochEntry] = []
    snapshot: bytes | None = None
    if remote is not None and tiered(log):
        segment = _segment_ending_at(remote, topic, partition, start - 1)
        if segment is None:
            logger.warning(
                "%s-%d: no copied segment ends at %d: starting there without its producer "
                "state and leader epochs",
                topic,
                partition,
                start - 1,
            )
        else:
            store = remote.reader.store
            key = _segment_key(topic, segment)
            text = store.get(segment_object(key, LEADER_EPOCH_CHECKPOINT)).decode()
            epochs = (
                parse_epoch_entries(text, f"remote segment {segment.segment_id}") if text else []
            )
            snapshot = store.get(segment_object(key, PRODUCER_SNAPSHOT)) or None
            logger.info(
                "%s-%d: starting at %d from the object store: %d leader epochs, producer "
                "snapshot of %d bytes (segment %s)",
                topic,
                partition,
                start,
                len(epochs),
                len(snapshot or b""),
                segment.segment_id,
            )
    log.truncate_fully_and_start_at(start, epochs=epochs, producer_snapshot=snapshot)


def _segment_key(topic: str, segment: RemoteSegment) -> SegmentKey:
    return SegmentKey(
        topic, segment.topic_id, segment.partition, segment.base_offset, segment.segment_id
    )


def _segment_ending_at(
    remote: RemoteFetches, topic: str, partition: int, end: int
) -> RemoteSegment | None:
    """The copied segment whose last offset is `end` (its metadata re-read once when the
    cached view has none: the leader may have copied it just now)."""
    topic_id = remote.topic_id(topic, partition)
    if not topic_id:
        return None
    for attempt in range(2):
        if attempt:
            remote.metadata.invalidate(topic_id, partition)
        for segment in remote.metadata.copied_segments(topic_id, partition):
            if segment.end_offset == end:
                return segment
    return None
