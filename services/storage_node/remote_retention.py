"""The total retention of a tiered partition (Kafka's RLMExpirationTask): retention.ms and
retention.bytes applied to the remote segments, oldest first, stopping at the first that must
stay (segments go from the start of the log only, never from the middle):

- time: a remote segment whose largest timestamp is older than retention.ms;
- size: while the partition's total size (its remote segments plus the local bytes not yet
  copied) passes retention.bytes by at least the segment's size.

and, first, every segment wholly below the log start DeleteRecords set (kept in the store
beside the segments' metadata, remote_metadata.py: the local log's start offset is the local
one, which cannot say what DeleteRecords asked of the remote ones).

Each goes DELETE_SEGMENT_STARTED, objects deleted, DELETE_SEGMENT_FINISHED; then the log start
offset moves past it (the local log's too, when its segments start earlier).
"""

from __future__ import annotations

import logging

from seglog.storage.log import Log

from .remote_copier import PartitionCopier

logger = logging.getLogger(__name__)


def expire_remote_segments(copier: PartitionCopier, topic_id: str, log: Log, *, now_ms: int) -> int:
    config = log.config
    if not config.delete:
        return 0
    metadata = copier.metadata
    floor = metadata.log_start_floor(topic_id, log.partition)
    # Segments wholly below the log start DeleteRecords set go first, whatever retention says.
    below = [s for s in metadata.copied_segments(topic_id, log.partition) if s.end_offset < floor]
    segs = metadata.segments(topic_id, log.partition)
    if not segs and not below:
        return 0
    copied_end = (segs or below)[-1].end_offset
    local_only = sum(
        s.size for s in log.segments if s.base_offset > copied_end
    )  # bytes the store does not hold yet
    total = sum(s.size_bytes for s in segs) + local_only
    doomed = list(below)
    for seg in segs:
        by_time = config.retention_ms >= 0 and seg.max_timestamp_ms < now_ms - config.retention_ms
        by_size = config.retention_bytes >= 0 and total - seg.size_bytes >= config.retention_bytes
        if not (by_time or by_size):
            break
        doomed.append(seg)
        total -= seg.size_bytes
    for seg in doomed:
        copier.delete(seg)
        logger.info(
            "%s-%d: remote segment %d-%d deleted by retention",
            log.topic, log.partition, seg.base_offset, seg.end_offset,
        )  # fmt: skip
    if doomed:
        new_start = doomed[-1].end_offset + 1
        if new_start > log.log_start_offset and new_start <= log.log_end_offset:
            log.delete_records_before(new_start)
    return len(doomed)
