"""ListOffsets on a leader whose older data lies in the object store (KIP-405, KIP-1005), as
Kafka's UnifiedLog.fetchOffsetByTimestamp answers with remote storage enabled:
- EARLIEST (-2): the log start, the remote one when segments were copied below the local
  start (the earliest offset a consumer can fetch), as last learnt from the metadata;
- EARLIEST_LOCAL (-4): the local log start;
- LATEST_TIERED (-5): the highest offset copied (inclusive), -1 when none is, as the node's
  remote log manager keeps it on the log;
- a timestamp: the remote segments below the local start first (their time indexes), then
  the local log;
- LATEST (-1) and MAX_TIMESTAMP (-3): the local log, as Kafka's.
A topic without remote storage (or a node without a store) answers from the local log alone,
with -4 the same as -2 and -5 answering -1, and never calls the store."""

from __future__ import annotations

from seglog.records.batch import NO_TIMESTAMP
from seglog.storage import Log
from seglog.storage.log import TimestampAndOffset
from seglog.storage.log_reading import EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP

from .fetch_reads import tiered
from .remote_fetches import RemoteFetches


def list_offset(
    log: Log,
    topic: str,
    partition: int,
    timestamp_ms: int,
    remote: RemoteFetches | None,
    max_offset: int,
) -> TimestampAndOffset | None:
    """`max_offset`: the high watermark, or the last stable offset for READ_COMMITTED."""
    if remote is None or not tiered(log):
        return log.offset_for_timestamp(timestamp_ms, max_offset=max_offset)
    local_start = log.log_start_offset
    if timestamp_ms == EARLIEST_TIMESTAMP:
        start = remote.earliest_offset(topic, partition, local_start)
        return TimestampAndOffset(NO_TIMESTAMP, start)
    if timestamp_ms == LATEST_TIERED_TIMESTAMP:
        # Kafka's highestOffsetInRemoteStorage: what the node's remote log manager last
        # learnt the store holds (-1 until it knows); no store call on this path.
        return TimestampAndOffset(NO_TIMESTAMP, log.highest_offset_in_remote_storage)
    if timestamp_ms >= 0:
        found = remote.offset_for_timestamp(topic, partition, timestamp_ms, local_start)
        if found is not None:
            return TimestampAndOffset(found[1], found[0])
    return log.offset_for_timestamp(timestamp_ms, max_offset=max_offset)
