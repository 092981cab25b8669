"""Where a follower cuts its log when its leader answers a diverging epoch (Kafka's KIP-101
and KIP-279 truncation by leader epoch, as its AbstractFetcherThread computes it): the end
of the last epoch both logs share, never past either log's end; without an end offset from
the leader, the follower's own high watermark."""

from __future__ import annotations

from seglog.storage import Log


def truncation_offset(log: Log, leader_epoch: int, leader_end_offset: int) -> int:
    """Where a follower cuts its log when the leader answered a diverging epoch."""
    leo = log.log_end_offset
    if leader_end_offset < 0:
        return min(log.high_watermark, leo)
    local_epoch, local_end = log.end_offset_for_epoch(leader_epoch)
    if local_epoch < 0:
        return min(leader_end_offset, leo)
    if local_epoch == leader_epoch:
        return min(local_end, leader_end_offset, leo)
    return min(local_end, leo)
