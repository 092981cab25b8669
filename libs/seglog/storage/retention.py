"""Retention for `cleanup_policy` delete: which whole segments may go.

Three rules, each walking from the oldest segment and stopping at the first that must stay
(segments are deleted oldest first, never from the middle):

- time: the segment's largest timestamp is older than `retention_ms`;
- size: the log is larger than `retention_bytes` by at least the segment's size (the active
  segment included, so `retention_bytes` 0 deletes everything written);
- log start offset: every offset of the segment is below the log start offset.

The active segment counts too: when it alone is expired by time (or by the start offset)
and holds data, `Log.delete_segments` rolls a new empty active segment first.
"""

from __future__ import annotations

from .log import Log
from .segment import LogSegment


def _expired_by_time(log: Log, now_ms: int) -> list[LogSegment]:
    if log.config.retention_ms < 0:
        return []
    limit = now_ms - log.config.retention_ms
    out = []
    for segment in log.segments:
        if segment.size == 0 or segment.largest_timestamp_ms >= limit:
            break
        out.append(segment)
    return out


def _over_size(log: Log) -> list[LogSegment]:
    if log.config.retention_bytes < 0:
        return []
    excess = log.size_in_bytes - log.config.retention_bytes
    out = []
    for segment in log.segments:
        # As Kafka: the active segment counts too when it holds data, which only
        # retention_bytes=0 reaches (it then rolls and every record goes).
        if segment.size == 0 or excess < segment.size:
            break
        excess -= segment.size
        out.append(segment)
    return out


def _below_start_offset(log: Log) -> list[LogSegment]:
    segments = log.segments
    out = []
    for segment, following in zip(segments, segments[1:], strict=False):
        if following.base_offset > log.log_start_offset:
            break
        out.append(segment)
    return out


def delete_old_segments(log: Log, now_ms: int) -> int:
    """Apply every rule that the log's policy enables; return how many segments went."""
    doomed: list[LogSegment] = []
    if log.config.delete:
        doomed = _expired_by_time(log, now_ms)
        by_size = _over_size(log)
        if len(by_size) > len(doomed):
            doomed = by_size
    by_start = _below_start_offset(log)
    if len(by_start) > len(doomed):
        doomed = by_start
    if doomed:
        log.delete_segments(doomed)
    log.delete_due_files()
    return len(doomed)
