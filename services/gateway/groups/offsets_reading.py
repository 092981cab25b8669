"""Reading a partition of `__consumer_offsets` back from the node that leads it: from its log
start to its high watermark when a gateway first answers for its groups (`read_partition`), and
on from where reading stopped to catch up with what others appended (`read_on`). Batches are
applied to the partition's contents by offsets_contents.py, the newest record per key winning,
as compaction would leave it."""

from __future__ import annotations

import logging

import grpc

from seglog.errors import CoordinatorLoadInProgressError, SeglogError
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.v1 import common_pb2

from .offsets_contents import OFFSETS_TOPIC, PartitionContents, apply_batches

logger = logging.getLogger(__name__)

_LOAD_FETCH_BYTES = 8 * 1024 * 1024
NODE_CALL_TIMEOUT_S = 30.0


def read_partition(stub, partition: int) -> PartitionContents:  # type: ignore[no-untyped-def]
    """Read the partition from its start to its high watermark, the newest record per key
    winning, as compaction would leave it."""
    contents = PartitionContents()
    try:
        earliest = stub.ListOffsets(
            common_pb2.ListOffsetsRequest(
                partitions=[
                    common_pb2.ListOffsetsPartition(
                        topic=OFFSETS_TOPIC, partition=partition, timestamp=-2
                    )
                ]
            ),
            timeout=NODE_CALL_TIMEOUT_S,
        ).partitions[0]
        if earliest.error:
            raise error_from_code(earliest.error, earliest.error_message)
        read_on(stub, contents, partition, earliest.offset)
    except grpc.RpcError as exc:
        raise CoordinatorLoadInProgressError(
            f"reading {OFFSETS_TOPIC}-{partition} back failed: {error_from_rpc(exc)}"
        ) from None
    except SeglogError as exc:
        if exc.retriable:
            raise CoordinatorLoadInProgressError(
                f"reading {OFFSETS_TOPIC}-{partition} back failed: {exc}"
            ) from None
        raise
    logger.info(
        "loaded committed offsets of %d groups from %s-%d",
        len(contents.offsets),
        OFFSETS_TOPIC,
        partition,
    )
    return contents


def read_on(stub, contents: PartitionContents, partition: int, offset: int) -> None:  # type: ignore[no-untyped-def]
    """Apply the partition's batches from `offset` to its high watermark."""
    contents.next_offset = max(contents.next_offset, offset)
    while True:
        request = common_pb2.FetchRequest(min_bytes=1, max_wait_ms=0, max_bytes=_LOAD_FETCH_BYTES)
        request.partitions.add(
            topic=OFFSETS_TOPIC,
            partition=partition,
            fetch_offset=offset,
            partition_max_bytes=_LOAD_FETCH_BYTES,
        )
        high_watermark = offset
        started_at = offset
        for message in stub.Fetch(request, timeout=NODE_CALL_TIMEOUT_S):
            if message.error:
                raise error_from_code(message.error, message.error_message)
            high_watermark = message.high_watermark
            offset = max(offset, apply_batches(contents, partition, message.records))
        if offset >= high_watermark:
            break
        if offset == started_at:
            logger.error(
                "%s-%d: cannot read past offset %d (high watermark %d); serving what "
                "was read before it",
                OFFSETS_TOPIC,
                partition,
                offset,
                high_watermark,
            )
            break
