"""A consumer's questions about offsets by position in the log (earliest, latest) or by time,
answered by the partitions' leaders through the gateway (ListOffsets), as Kafka's consumer's
beginningOffsets / endOffsets / offsetsForTimes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import SeglogError
from .gateway import EARLIEST, LATEST, GatewayClient, partition_offsets
from .structs import OffsetAndTimestamp, TopicPartition


def offsets_for_times(
    client: GatewayClient, timestamps: Mapping[TopicPartition, int]
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """Per partition, the earliest offset whose timestamp is >= the given one (through the
    time index), or None when no record is that late."""
    for tp, ts in timestamps.items():
        if ts < 0:
            raise SeglogError(f"negative timestamp {ts} for {tp.topic}-{tp.partition}")
    found = partition_offsets(client, {TopicPartition(*tp): ts for tp, ts in timestamps.items()})
    return {
        tp: OffsetAndTimestamp(offset, ts) if offset >= 0 else None
        for tp, (offset, ts) in found.items()
    }


def offsets_at(
    client: GatewayClient, partitions: Iterable[TopicPartition], *, latest: bool
) -> dict[TopicPartition, int]:
    """Each partition's log start offset, or its end (`latest`)."""
    target = LATEST if latest else EARLIEST
    found = partition_offsets(
        client, dict.fromkeys((TopicPartition(*p) for p in partitions), target)
    )
    return {tp: offset for tp, (offset, _) in found.items()}
