"""Where a follower cuts its log when its leader answers a diverging epoch (Kafka's KIP-101
and KIP-279 truncation by leader epoch, as its AbstractFetcherThread computes it): the end
of the last epoch both logs share, never past either log's end; without an end offset from
the leader, the follower's own high watermark. And where it cuts or restarts its log when the
leader answers that its fetch offset is out of range, or answers with a batch that starts
below the follower's log end."""

from __future__ import annotations

import logging

import grpc

from seglog.errors import SeglogError
from seglog.records.batch import HEADER_BYTES, read_header
from seglog.storage import Log
from seglog.v1 import common_pb2, storage_pb2, storage_pb2_grpc

from .remote_fetches import RemoteFetches
from .tiered_catch_up import start_at_leader_start

logger = logging.getLogger(__name__)

DESCRIBE_TIMEOUT_S = 5.0


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


def repair_out_of_range(
    leader: storage_pb2_grpc.StorageNodeStub,
    log: Log,
    topic: str,
    partition: int,
    remote: RemoteFetches | None = None,
) -> bool:
    """After OFFSET_OUT_OF_RANGE from the leader (Kafka's handleOutOfRangeError): asked for
    its log's ends, cut a log that runs past the leader's end, or start empty at the
    leader's log start when retention went past this log's end (a tiered topic's with the
    state its copied data leaves: tiered_catch_up.py). True when it did either."""
    try:
        described = leader.DescribePartitions(
            storage_pb2.DescribePartitionsRequest(
                partitions=[storage_pb2.HostedPartitionRef(topic=topic, partition=partition)]
            ),
            timeout=DESCRIBE_TIMEOUT_S,
        ).partitions[0]
    except (grpc.RpcError, IndexError):
        return False
    if described.error != common_pb2.NONE:
        return False
    if described.log_end_offset < log.log_end_offset:
        log.truncate_to(described.log_end_offset)
        return True
    if described.log_start_offset > log.log_end_offset:
        try:
            start_at_leader_start(remote, log, topic, partition, described.log_start_offset)
        except SeglogError as exc:  # the store failed: the fetcher backs off, asks again
            logger.warning("%s-%d: not started from the object store: %s", topic, partition, exc)
            return False
        return True
    return False


def cut_at_leader_batch(log: Log, records: bytes | memoryview) -> int | None:
    """A fetch answer whose first batch starts below this log's end and holds it: the
    leader's batch boundary is not this log's, so the two logs hold different batches over
    the same offsets (diverged without a truncation; a leader's read returns the batch that
    holds the fetch offset, which starts at it on a log that matches). Kafka's rule is that
    a follower never keeps what its leader does not hold: the log is cut at that batch's
    base offset (whole batches, so possibly lower) and fetched again, each cut moving the
    log end down until the boundaries meet, instead of refusing the same answer forever.
    Returns where it cut, or None when the answer starts at the log end as it should."""
    if len(records) < HEADER_BYTES:
        return None
    header = read_header(records)
    leo = log.log_end_offset
    if not header.base_offset < leo <= header.last_offset:
        return None
    logger.warning(
        "%s: the leader's batch %d..%d holds this log's end %d: the logs diverged inside it; "
        "truncating to %d and fetching again",
        log.directory.name,
        header.base_offset,
        header.last_offset,
        leo,
        header.base_offset,
    )
    log.truncate_to(header.base_offset)
    return header.base_offset
