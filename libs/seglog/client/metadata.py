"""The clients' view of the cluster: each topic's partitions, their leader node and leader
epoch, learnt from the gateway's DescribeTopics and refreshed when it goes stale.

The producer groups batches by leader node (one request per node, which the gateway forwards
to that node as it arrived) and both clients send the epoch they saw, so a leader that
restarted answers NOT_LEADER_OR_FOLLOWER and the client refreshes here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import RequestTimedOutError, SeglogError, UnknownTopicOrPartitionError
from ..rpc.status import error_from_code
from .gateway import GatewayClient


class MetadataTimeoutError(RequestTimedOutError):
    """`send` waited `max_block_ms` for a topic's metadata (kafka-python's KafkaTimeoutError,
    Kafka's "Topic … not present in metadata after … ms")."""


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


class Metadata:
    def __init__(
        self,
        client: GatewayClient,
        *,
        max_age_ms: int = 300_000,
        allow_auto_topic_creation: bool = False,
    ) -> None:
        self._client = client
        # The producer's: a topic it names is created if the gateway auto-creates topics.
        self._allow_auto_topic_creation = allow_auto_topic_creation
        self._max_age_s = max_age_ms / 1000
        self._lock = threading.Lock()
        self._topics: dict[str, TopicInfo] = {}
        self._fetched_at: dict[str, float] = {}
        self._stale: set[str] = set()
        # Each known topic's partition count, kept current by `refresh`; the producer's send
        # path reads it without the lock (a dict get is atomic in CPython).
        self.partition_counts: dict[str, int] = {}

    def topic(self, name: str) -> TopicInfo:
        """The topic's metadata, fetched when missing, stale or older than the max age."""
        with self._lock:
            info = self._topics.get(name)
            fresh = (
                info is not None
                and name not in self._stale
                and time.monotonic() - self._fetched_at[name] < self._max_age_s
            )
        if fresh:
            assert info is not None
            return info
        return self.refresh([name])[name]

    def cached(self, name: str) -> TopicInfo | None:
        with self._lock:
            return self._topics.get(name)

    def invalidate(self, name: str) -> None:
        """Mark for refresh on next use (a leader moved or a node went away)."""
        with self._lock:
            self._stale.add(name)

    def needs_refresh(self, name: str) -> bool:
        """Unknown, marked stale, or older than the max age (metadata_max_age_ms)."""
        with self._lock:
            fetched_at = self._fetched_at.get(name)
            return (
                name in self._stale
                or fetched_at is None
                or time.monotonic() - fetched_at >= self._max_age_s
            )

    def refresh(self, names: Iterable[str]) -> dict[str, TopicInfo]:
        """Ask the gateway; raises the first topic's error (UNKNOWN_TOPIC_OR_PARTITION, …)
        after keeping what the others answered. A topic that no longer exists is forgotten,
        so the producer stops taking records for it (they wait for its metadata instead)."""
        out: dict[str, TopicInfo] = {}
        first_error: SeglogError | None = None
        gone: list[str] = []
        described = self._client.describe_topics(
            list(names), allow_auto_topic_creation=self._allow_auto_topic_creation
        )
        for description in described:
            if description.error:
                error = error_from_code(description.error, description.error_message)
                if isinstance(error, UnknownTopicOrPartitionError):
                    gone.append(description.name)
                    error = UnknownTopicOrPartitionError(
                        f"topic {description.name!r} does not exist"
                    )
                first_error = first_error or error
                continue
            info = TopicInfo(
                description.name,
                tuple(
                    PartitionInfo(p.partition, p.leader, p.leader_epoch)
                    for p in sorted(description.partitions, key=lambda p: p.partition)
                ),
            )
            out[info.name] = info
        now = time.monotonic()
        with self._lock:
            for name, info in out.items():
                self._topics[name] = info
                self._fetched_at[name] = now
                self._stale.discard(name)
                self.partition_counts[name] = info.num_partitions
            for name in gone:
                self._topics.pop(name, None)
                self._fetched_at.pop(name, None)
                self._stale.discard(name)
                self.partition_counts.pop(name, None)
        if first_error is not None:
            raise first_error
        return out

    def try_refresh(self, names: Iterable[str]) -> SeglogError | None:
        try:
            self.refresh(names)
        except SeglogError as exc:
            return exc
        return None
