"""What the admin API answers about consumer groups (Kafka's ConsumerGroupListing,
ConsumerGroupDescription, MemberDescription, and a committed offset with its lag)."""

from __future__ import annotations

from dataclasses import dataclass

from .structs import TopicPartition


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    member_count: int


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    generation: int
    assignment_strategy: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True)
class GroupOffset:
    """A group's position in one partition: lag = log end offset - committed offset."""

    committed: int
    log_end_offset: int
    lag: int
    metadata: str = ""
