"""Kafka's record formats in `__consumer_offsets` (group-coordinator/src/main/resources/
common/message/*.json), written and read byte for byte. Big-endian; a string is an int16
length + UTF-8 (-1 for null), bytes an int32 length; in flexible versions (4+) strings are
"compact" (unsigned varint length + 1, 0 for null), arrays likewise, and each struct ends with
tagged fields (an unsigned varint count, then tag, size, data each), which readers skip.

    key type 1/0  OffsetCommitKey    int16 version, string group, string topic, int32 partition
    key type 2    GroupMetadataKey   int16 version=2, string group

    OffsetCommitValue  v0 offset, metadata, commit_ts
                       v1 offset, metadata, commit_ts, expire_ts
                       v2 offset, metadata, commit_ts
                       v3 offset, leader_epoch, metadata, commit_ts         (written)
                       v4 as v3, flexible (Kafka 4.x writes it)
    GroupMetadataValue v0 protocol_type, int32 generation, protocol?, leader?, members[]
                       v1 + member rebalance_timeout; v2 + current_state_timestamp;
                       v3 + member group_instance_id?                       (written)
                       v4 as v3, flexible
        member: member_id, [group_instance_id?], client_id, client_host,
                [int32 rebalance_timeout], int32 session_timeout, bytes subscription,
                bytes assignment

A null value (tombstone) deletes what its key names. Subscriptions and assignments inside a
member are the consumer protocol's (ConsumerProtocolSubscription / Assignment, version 0):
int16 version, then topics as string arrays (subscription) or (topic, int32 partitions[])
(assignment), then nullable user data bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from seglog.errors import CorruptRecordError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
CONSUMER_PROTOCOL_TYPE = "consumer"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupMetadata:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


# -- where a group's records live (Kafka's GroupCoordinator.partitionFor) -----------------


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


# -- writing ---------------------------------------------------------------------------------


def _string(text: str | None) -> bytes:
    if text is None:
        return _INT16.pack(-1)
    data = text.encode()
    return _INT16.pack(len(data)) + data


def _bytes(data: bytes | None) -> bytes:
    return _INT32.pack(-1) if data is None else _INT32.pack(len(data)) + data


def encode_offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return (
        _INT16.pack(OFFSET_COMMIT_KEY_VERSION)
        + _string(group_id)
        + _string(topic)
        + _INT32.pack(partition)
    )


def encode_group_key(group_id: str) -> bytes:
    return _INT16.pack(GROUP_METADATA_KEY_VERSION) + _string(group_id)


def encode_offset_value(offset: int, leader_epoch: int, metadata: str, commit_ts_ms: int) -> bytes:
    return (
        _INT16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _INT64.pack(offset)
        + _INT32.pack(leader_epoch)
        + _string(metadata)
        + _INT64.pack(commit_ts_ms)
    )


def encode_group_value(group: GroupMetadata) -> bytes:
    parts = [
        _INT16.pack(GROUP_METADATA_VALUE_VERSION),
        _string(group.protocol_type),
        _INT32.pack(group.generation),
        _string(group.protocol),
        _string(group.leader),
        _INT64.pack(group.current_state_timestamp_ms),
        _INT32.pack(len(group.members)),
    ]
    for m in group.members:
        parts += [
            _string(m.member_id),
            _string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _INT32.pack(m.rebalance_timeout_ms),
            _INT32.pack(m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


def encode_subscription(topics: Sequence[str]) -> bytes:
    return (
        _INT16.pack(0)
        + _INT32.pack(len(topics))
        + b"".join(_string(t) for t in topics)
        + _bytes(None)
    )


def encode_assignment(assignment: Mapping[str, Sequence[int]]) -> bytes:
    parts = [_INT16.pack(0), _INT32.pack(len(assignment))]
    for topic, partitions in sorted(assignment.items()):
        parts.append(_string(topic))
        parts.append(_INT32.pack(len(partitions)))
        parts += [_INT32.pack(p) for p in partitions]
    parts.append(_bytes(None))
    return b"".join(parts)


# -- reading ---------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def take(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise CorruptRecordError("unsigned varint runs past its record")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.take(_INT32 if wide else _INT16)

    def _slice(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise CorruptRecordError(f"a field of {n} bytes runs past its record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def nullable_string(self) -> str | None:
        n = self._length(wide=False)
        return None if n < 0 else self._slice(n).decode()

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise CorruptRecordError("a non-nullable string is null")
        return text

    def bytes_(self) -> bytes:
        n = self._length(wide=True)
        return b"" if n < 0 else self._slice(n)

    def array_length(self) -> int:
        n = self._length(wide=True)
        if n < 0 or n > len(self.data):
            raise CorruptRecordError(f"array of {n} entries in a {len(self.data)}-byte record")
        return n

    def skip_tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # tag
                self._slice(self.uvarint())


def key_type(data: bytes) -> int:
    """The key's version, which says what it names: 0/1 a committed offset, 2 a group."""
    return _Reader(data).take(_INT16)


def decode_offset_key(data: bytes) -> tuple[str, str, int]:
    reader = _Reader(data)
    reader.take(_INT16)
    return reader.string(), reader.string(), reader.take(_INT32)


def decode_group_key(data: bytes) -> str:
    reader = _Reader(data)
    reader.take(_INT16)
    return reader.string()


def _value_reader(data: bytes, what: str) -> tuple[_Reader, int]:
    """A reader past the value's version (0-4 known; 4+ flexible), and the version."""
    version = _Reader(data).take(_INT16)
    if not 0 <= version <= 4:
        raise CorruptRecordError(f"{what} value version {version} is not supported")
    reader = _Reader(data, flexible=version >= 4)
    reader.pos = _INT16.size
    return reader, version


def decode_offset_value(data: bytes) -> CommittedOffset:
    reader, version = _value_reader(data, "offset commit")
    offset = reader.take(_INT64)
    leader_epoch = reader.take(_INT32) if version >= 3 else -1
    metadata = reader.string()
    timestamp = reader.take(_INT64)
    if version == 1:
        reader.take(_INT64)  # expire timestamp, no longer used by Kafka
    reader.skip_tagged_fields()
    return CommittedOffset(offset, leader_epoch, metadata, timestamp)


def decode_group_value(data: bytes) -> GroupMetadata:
    reader, version = _value_reader(data, "group metadata")
    protocol_type = reader.string()
    generation = reader.take(_INT32)
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_ts = reader.take(_INT64) if version >= 2 else -1
    members = []
    for _ in range(reader.array_length()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout = reader.take(_INT32) if version >= 1 else -1
        session_timeout = reader.take(_INT32)
        subscription = reader.bytes_()
        assignment = reader.bytes_()
        reader.skip_tagged_fields()
        members.append(
            MemberMetadata(
                member_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
                instance_id,
            )
        )
    reader.skip_tagged_fields()
    return GroupMetadata(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def decode_subscription_topics(data: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (any version: they come first)."""
    reader = _Reader(data)
    reader.take(_INT16)
    return [reader.string() for _ in range(reader.array_length())]
