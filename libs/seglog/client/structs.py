"""Small value types the clients share, with Kafka's names."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """What a transactional producer's send_offsets_to_transaction carries of the consumer
    (Kafka's ConsumerGroupMetadata, KIP-447): its group, generation and member id, so the
    group's coordinator refuses a zombie consumer's offsets. -1 and "": not checked."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp_ms: int
