"""Retention for `cleanup_policy` delete: which whole segments may go.

Three rules, each walking from the oldest segment and stopping at the first that must stay
(segments are deleted oldest first, never from the middle):

- time: the segment's largest timestamp is older than `retention_ms`;
- size: the log is larger than `retention_bytes` by at least the segment's size (the active
  segment included, so `retention_bytes` 0 deletes everything written);
- log start offset: every offset of the segment is below the log start offset.

The active segment counts too: when it alone is expired by time (or by the start offset)
and holds data, `Log.delete_segments` rolls a new empty active segment first.

A tiered log (remote.storage.enable, KIP-405) applies `local.retention.ms/bytes` instead, to
segments the object store already holds only (every offset at or below the log's
`highest_offset_in_remote_storage`): a segment not yet copied stays whatever its age, so an
object store that is down never costs data. The total retention (retention.ms/bytes) is the
remote log manager's (services/storage_node/remote_retention.py).
"""

from __future__ import annotations

from .log import Log
from .segment import LogSegment


def _retention(log: Log) -> tuple[int, int]:
    """(ms, bytes) that bound what stays in this log's local segments."""
    config = log.config
    if config.remote_storage_enable:
        return config.effective_local_retention_ms, config.effective_local_retention_bytes
    return config.retention_ms, config.retention_bytes


def _copied(log: Log, doomed: list[LogSegment]) -> list[LogSegment]:
    """The leading segments of `doomed` that the object store holds whole."""
    if not log.config.remote_storage_enable:
        return doomed
    copied_end = log.highest_offset_in_remote_storage
    segments = log.segments
    following = {id(s): n for s, n in zip(segments, segments[1:], strict=False)}
    out = []
    for segment in doomed:
        after = following.get(id(segment))
        # The active segment (nothing follows it) is never copied whole.
        if after is None or after.base_offset - 1 > copied_end:
            break
        out.append(segment)
    return out


def _expired_by_time(log: Log, now_ms: int) -> list[LogSegment]:
    retention_ms = _retention(log)[0]
    if retention_ms < 0:
        return []
    limit = now_ms - retention_ms
    out = []
    for segment in log.segments:
        if segment.size == 0 or segment.largest_timestamp_ms >= limit:
            break
        out.append(segment)
    return out


def _over_size(log: Log) -> list[LogSegment]:
    retention_bytes = _retention(log)[1]
    if retention_bytes < 0:
        return []
    excess = log.size_in_bytes - retention_bytes
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
        doomed = _copied(log, _expired_by_time(log, now_ms))
        by_size = _copied(log, _over_size(log))
        if len(by_size) > len(doomed):
            doomed = by_size
    by_start = _below_start_offset(log)
    if len(by_start) > len(doomed):
        doomed = by_start
    if doomed:
        log.delete_segments(doomed)
    log.delete_due_files()
    return len(doomed)
