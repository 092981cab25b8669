"""Kafka's DeleteRecords on a partition's leader: the checks before its log start offset moves
(a leader at the caller's epoch, a topic whose cleanup.policy deletes, an offset no later than
the high watermark) and the move itself; on a tiered partition, the log start recorded in the
object store too. The replica manager holds the partition's lock around the local move (not
the store's) and wakes the partition's waiting fetches after."""

from __future__ import annotations

from seglog.errors import OffsetOutOfRangeError, PolicyViolationError

from .partition import Partition
from .remote_fetches import RemoteFetches

DELETE_UP_TO_HIGH_WATERMARK = -1


def delete_records_as_leader(held: Partition, offset: int, client_epoch: int) -> tuple[int, int]:
    """Move `held`'s log start offset to `offset` (-1: the high watermark); returns the offset
    asked for and the (local) log start offset now."""
    held.require_leader(client_epoch)
    topic, partition, log = held.topic, held.partition, held.log
    if not log.config.delete:  # as Kafka: a compacted topic's records go by key only
        raise PolicyViolationError(
            f"{topic}-{partition}: records cannot be deleted from a topic whose "
            f"cleanup.policy is {log.config.cleanup_policy}"
        )
    high_watermark = log.high_watermark
    wanted = high_watermark if offset == DELETE_UP_TO_HIGH_WATERMARK else offset
    if not 0 <= wanted <= high_watermark:
        raise OffsetOutOfRangeError(
            f"{topic}-{partition}: cannot delete records before {offset}: the offset must "
            f"be -1 (the high watermark) or in [0, {high_watermark}]"
        )
    return wanted, log.delete_records_before(wanted)


def move_remote_log_start(
    remote: RemoteFetches, topic: str, partition: int, wanted: int, local_start: int
) -> int:
    """A tiered partition's DeleteRecords: the log start recorded in the object store moves to
    `wanted` (remote_metadata.set_log_start_offset), so reads below it answer
    OFFSET_OUT_OF_RANGE and remote retention deletes the segments wholly below it, as Kafka's
    logStartOffset does below its local log start. A store that fails answers the request a
    retriable error (the local move, if any, stays: asking again finishes it). Returns the
    partition's log start now (the remote one when copies lie below the local start)."""
    topic_id = remote.topic_id(topic, partition)
    if not topic_id:
        return local_start
    metadata = remote.metadata
    metadata.invalidate(topic_id, partition)  # act on what the store holds now
    metadata.set_log_start_offset(topic_id, partition, wanted)
    remote.forget(topic, partition)  # what readers learnt of the remote start is stale
    start = metadata.log_start_offset(topic_id, partition)
    return local_start if start is None else min(start, local_start)
