"""Kafka's DeleteRecords on a partition's leader: the checks before its log start offset moves
(a leader at the caller's epoch, a topic whose cleanup.policy deletes, an offset no later than
the high watermark) and the move itself. The replica manager holds the partition's lock around
it and wakes the partition's waiting fetches after."""

from __future__ import annotations

from seglog.errors import OffsetOutOfRangeError, PolicyViolationError

from .partition import Partition

DELETE_UP_TO_HIGH_WATERMARK = -1


def delete_records_as_leader(held: Partition, offset: int, client_epoch: int) -> int:
    """Move `held`'s log start offset to `offset` (-1: the high watermark); returns the log
    start offset now."""
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
    return log.delete_records_before(wanted)
