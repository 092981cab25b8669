"""Committed offsets, kept the way Kafka keeps them: records in the compacted internal topic
`__consumer_offsets`, one per (group, topic, partition), the newest winning. Compaction keeps
the topic small; a gateway that restarts reads each partition of it back before answering
for the groups it holds.

A group's records live in partition `abs(java_hash(group_id)) % partitions`, as in Kafka.
Key and value are Kafka's own formats (big-endian; a string is an int16 length + UTF-8):

    key   (OffsetCommitKey, version 1)    int16 version=1, string group, string topic,
                                          int32 partition
    value (OffsetCommitValue, version 3)  int16 version=3, int64 offset, int32 leader_epoch,
                                          string metadata, int64 commit_timestamp
          versions 0-2 are read too:      v0 offset, metadata, timestamp;
                                          v1 offset, metadata, commit_ts, expire_ts;
                                          v2 offset, metadata, commit_ts
    a null value (tombstone) deletes the committed offset.

Keys of version 0 are offset keys as well; version 2 keys hold Kafka's group metadata, which
seglog does not write (membership is rebuilt by the members joining again) and skips.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc

from seglog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    SeglogError,
)
from seglog.records import RecordBatch, RecordBatchBuilder, iter_batches
from seglog.rpc.status import error_from_code, error_from_rpc
from seglog.v1 import common_pb2

from .nodes import NodeConnections
from .registry import Registry

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's offsets.topic.segment.bytes; compaction is what keeps the topic small.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
_LOAD_FETCH_BYTES = 8 * 1024 * 1024
_NODE_CALL_TIMEOUT_S = 30.0

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


# -- Kafka's formats ------------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_group(group_id: str, num_partitions: int) -> int:
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions  # Kafka's Utils.abs


def _string(text: str) -> bytes:
    data = text.encode()
    return _INT16.pack(len(data)) + data


def encode_offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return _INT16.pack(1) + _string(group_id) + _string(topic) + _INT32.pack(partition)


def encode_offset_value(offset: int, leader_epoch: int, metadata: str, commit_ts_ms: int) -> bytes:
    return (
        _INT16.pack(3)
        + _INT64.pack(offset)
        + _INT32.pack(leader_epoch)
        + _string(metadata)
        + _INT64.pack(commit_ts_ms)
    )


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def string(self) -> str:
        n = self.take(_INT16)
        text = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return text


def decode_offset_key(data: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset key; None for group-metadata keys."""
    reader = _Reader(data)
    version = reader.take(_INT16)
    if version not in (0, 1):
        return None
    return reader.string(), reader.string(), reader.take(_INT32)


def decode_offset_value(data: bytes) -> CommittedOffset:
    reader = _Reader(data)
    version = reader.take(_INT16)
    offset = reader.take(_INT64)
    leader_epoch = reader.take(_INT32) if version >= 3 else -1
    metadata = reader.string()
    timestamp = reader.take(_INT64)
    if version > 3:
        raise SeglogError(f"offset commit value version {version} is not supported")
    return CommittedOffset(offset, leader_epoch, metadata, timestamp)


# -- the store -------------------------------------------------------------------------------

GroupOffsets = dict[tuple[str, int], CommittedOffset]


class OffsetsStore:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        create_topic: Callable[[str, int, dict[str, str]], None],
        *,
        num_partitions: int = 50,
    ) -> None:
        self.registry = registry
        self.connections = connections
        self._create_topic = create_topic
        self.default_num_partitions = num_partitions
        self._lock = threading.Lock()
        self._partition_locks: dict[int, threading.Lock] = {}
        # offsets partition -> group -> (topic, partition) -> committed offset
        self._cache: dict[int, dict[str, GroupOffsets]] = {}

    @property
    def num_partitions(self) -> int:
        topic = self.registry.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic is not None else self.default_num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.num_partitions)

    def _ensure_topic(self) -> None:
        if OFFSETS_TOPIC in self.registry.topics:
            return
        with self._lock:
            if OFFSETS_TOPIC not in self.registry.topics:
                try:
                    self._create_topic(
                        OFFSETS_TOPIC, self.default_num_partitions, dict(OFFSETS_TOPIC_CONFIGS)
                    )
                except SeglogError as exc:
                    raise CoordinatorNotAvailableError(
                        f"cannot create {OFFSETS_TOPIC}: {exc}"
                    ) from None

    def _leader(self, partition: int):  # type: ignore[no-untyped-def]
        route = self.registry.route(OFFSETS_TOPIC, partition)
        if not route.live or route.address is None:
            raise CoordinatorNotAvailableError(
                f"{OFFSETS_TOPIC}-{partition}: its node {route.leader} is not available"
            )
        return self.connections.get(route.leader, route.address)

    def _partition_lock(self, partition: int) -> threading.Lock:
        with self._lock:
            return self._partition_locks.setdefault(partition, threading.Lock())

    # -- reading back --------------------------------------------------------------------------

    def _loaded(self, partition: int) -> dict[str, GroupOffsets]:
        self._ensure_topic()
        groups = self._cache.get(partition)
        if groups is not None:
            return groups
        with self._partition_lock(partition):
            groups = self._cache.get(partition)
            if groups is None:
                groups = self._load(partition)
                self._cache[partition] = groups
        return groups

    def _load(self, partition: int) -> dict[str, GroupOffsets]:
        """Read the partition from its start to its high watermark, the newest record per key
        winning, as compaction would leave it."""
        stub = self._leader(partition).stub
        groups: dict[str, GroupOffsets] = {}
        offset = 0
        try:
            earliest = stub.ListOffsets(
                common_pb2.ListOffsetsRequest(
                    partitions=[
                        common_pb2.ListOffsetsPartition(
                            topic=OFFSETS_TOPIC, partition=partition, timestamp=-2
                        )
                    ]
                ),
                timeout=_NODE_CALL_TIMEOUT_S,
            ).partitions[0]
            if earliest.error:
                raise error_from_code(earliest.error, earliest.error_message)
            offset = earliest.offset
            while True:
                request = common_pb2.FetchRequest(
                    min_bytes=1, max_wait_ms=0, max_bytes=_LOAD_FETCH_BYTES
                )
                request.partitions.add(
                    topic=OFFSETS_TOPIC,
                    partition=partition,
                    fetch_offset=offset,
                    partition_max_bytes=_LOAD_FETCH_BYTES,
                )
                high_watermark = offset
                for message in stub.Fetch(request, timeout=_NODE_CALL_TIMEOUT_S):
                    if message.error:
                        raise error_from_code(message.error, message.error_message)
                    high_watermark = message.high_watermark
                    for batch in iter_batches(message.records):
                        if isinstance(batch, RecordBatch):
                            self._apply(groups, batch)
                            offset = max(offset, batch.header.next_offset)
                if offset >= high_watermark:
                    break
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
            len(groups),
            OFFSETS_TOPIC,
            partition,
        )
        return groups

    @staticmethod
    def _apply(groups: dict[str, GroupOffsets], batch: RecordBatch) -> None:
        if batch.header.is_control:
            return
        for record in batch.records():
            if record.key is None:
                continue
            key = decode_offset_key(record.key)
            if key is None:
                continue
            group_id, topic, partition = key
            if record.value is None:
                offsets = groups.get(group_id)
                if offsets is not None:
                    offsets.pop((topic, partition), None)
                    if not offsets:
                        del groups[group_id]
                continue
            groups.setdefault(group_id, {})[(topic, partition)] = decode_offset_value(record.value)

    def committed(self, group_id: str) -> GroupOffsets:
        return dict(self._loaded(self.partition_for(group_id)).get(group_id, {}))

    def group_ids(self) -> set[str]:
        """Every group with committed offsets (reads back every partition not yet loaded)."""
        self._ensure_topic()
        found: set[str] = set()
        for partition in range(self.num_partitions):
            found.update(self._loaded(partition))
        return found

    # -- writing -------------------------------------------------------------------------------

    def commit(self, group_id: str, offsets: Iterable[tuple[str, int, int, int, str]]) -> None:
        """Append one batch with a record per (topic, partition, offset, epoch, metadata);
        the cache changes only once the leader has written it."""
        partition = self.partition_for(group_id)
        groups = self._loaded(partition)
        now_ms = time.time_ns() // 1_000_000
        builder = RecordBatchBuilder()
        entries: GroupOffsets = {}
        for topic, topic_partition, offset, leader_epoch, metadata in offsets:
            builder.append(
                encode_offset_key(group_id, topic, topic_partition),
                encode_offset_value(offset, leader_epoch, metadata, now_ms),
                now_ms,
            )
            entries[(topic, topic_partition)] = CommittedOffset(
                offset, leader_epoch, metadata, now_ms
            )
        if not entries:
            return
        request = common_pb2.ProduceRequest(topic=OFFSETS_TOPIC, acks=1, timeout_ms=30_000)
        request.partitions.add(partition=partition, records=builder.build())
        with self._partition_lock(partition):
            try:
                response = self._leader(partition).stub.Append(
                    request, timeout=_NODE_CALL_TIMEOUT_S
                )
            except grpc.RpcError as exc:
                error = error_from_rpc(exc)
                raise CoordinatorNotAvailableError(f"writing offsets failed: {error}") from None
            result = response.partitions[0]
            if result.error:
                error = error_from_code(result.error, result.error_message)
                if error.retriable:
                    raise CoordinatorNotAvailableError(f"writing offsets failed: {error}")
                raise error
            groups.setdefault(group_id, {}).update(entries)
