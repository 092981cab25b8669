"""Kafka's record formats in `__transaction_state` (transaction-coordinator/src/main/resources/
common/message/TransactionLogKey.json and TransactionLogValue.json), written and read byte for
byte. Big-endian; a string is an int16 length + UTF-8; an array an int32 count (-1: null). In
the flexible version 1, strings and arrays are "compact" (unsigned varint length + 1, 0 for
null) and each struct ends with tagged fields (varint count, then tag, size, data each).

    key    int16 version=0, string transactional_id
    value  int16 version (0 written, as Kafka writes it below transaction.version 2; 1 read)
           int64  producer_id
           int16  producer_epoch
           int32  transaction_timeout_ms
           int8   transaction_status      (TxnState's ids, state.py)
           []     transaction_partitions  nullable: (string topic, []int32 partition_ids);
                                          null in Empty, as Kafka writes it
           int64  last_update_timestamp_ms
           int64  start_timestamp_ms
           v1 tagged: 0 previous_producer_id, 1 next_producer_id (int64, default -1),
                      2 client_transaction_version (int16, default 0)

A null value (tombstone) removes the transactional id (Kafka's expired ids). The partition of
a transactional id is Kafka's: abs(String.hashCode) % partitions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from seglog.errors import CorruptRecordError

from ..groups.offsets_formats import java_string_hash

KEY_VERSION = 0
VALUE_VERSION = 0
_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

TopicPartition = tuple[str, int]
MAX_STATUS = 7  # PrepareEpochFence, the last of Kafka's TransactionState ids (state.py)


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions  # Kafka's Utils.abs


# -- writing ---------------------------------------------------------------------------------


def _string(text: str) -> bytes:
    data = text.encode()
    return _INT16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _INT16.pack(KEY_VERSION) + _string(transactional_id)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return topics


def encode_value(value: TxnLogValue, *, empty_state: int = 0) -> bytes:
    out = bytearray(_INT16.pack(VALUE_VERSION))
    out += _INT64.pack(value.producer_id)
    out += _INT16.pack(value.producer_epoch)
    out += _INT32.pack(value.timeout_ms)
    out += _INT8.pack(value.status)
    if value.status == empty_state:
        out += _INT32.pack(-1)
    else:
        topics = _by_topic(value.partitions)
        out += _INT32.pack(len(topics))
        for topic, ids in topics.items():
            out += _string(topic) + _INT32.pack(len(ids))
            for partition in ids:
                out += _INT32.pack(partition)
    out += _INT64.pack(value.last_update_ms)
    out += _INT64.pack(value.start_ms)
    return bytes(out)


# -- reading ---------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def take(self, form: struct.Struct) -> int:
        if self.pos + form.size > len(self.data):
            raise CorruptRecordError("__transaction_state record ends early")
        (value,) = form.unpack_from(self.data, self.pos)
        self.pos += form.size
        return int(value)

    def varint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise CorruptRecordError("__transaction_state record: bad varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def length(self) -> int:
        """An array's or string's length (-1: null), compact in the flexible version."""
        if self.flexible:
            return self.varint() - 1
        return self.take(_INT32)

    def string(self) -> str:
        size = self.varint() - 1 if self.flexible else self.take(_INT16)
        if size < 0 or self.pos + size > len(self.data):
            raise CorruptRecordError("__transaction_state record: bad string")
        text = self.data[self.pos : self.pos + size].decode()
        self.pos += size
        return text

    def skip_tags(self) -> dict[int, bytes]:
        tags: dict[int, bytes] = {}
        if not self.flexible:
            return tags
        for _ in range(self.varint()):
            tag, size = self.varint(), self.varint()
            tags[tag] = self.data[self.pos : self.pos + size]
            self.pos += size
        return tags


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    version = reader.take(_INT16)
    if version != KEY_VERSION:
        raise CorruptRecordError(f"__transaction_state key version {version} is not 0")
    return reader.string()


def decode_value(data: bytes) -> TxnLogValue:
    version = _Reader(data).take(_INT16)
    if version not in (0, 1):
        raise CorruptRecordError(f"__transaction_state value version {version} is unknown")
    reader = _Reader(data, flexible=version >= 1)
    reader.pos = 2
    producer_id = reader.take(_INT64)
    producer_epoch = reader.take(_INT16)
    timeout_ms = reader.take(_INT32)
    status = reader.take(_INT8)
    if not 0 <= status <= MAX_STATUS:
        raise CorruptRecordError(f"__transaction_state: transaction status {status} is unknown")
    partitions: set[TopicPartition] = set()
    for _ in range(max(0, reader.length())):
        topic = reader.string()
        for _ in range(max(0, reader.length())):
            partitions.add((topic, reader.take(_INT32)))
        reader.skip_tags()
    last_update_ms = reader.take(_INT64)
    start_ms = reader.take(_INT64)
    tags = reader.skip_tags()
    return TxnLogValue(
        producer_id,
        producer_epoch,
        timeout_ms,
        status,
        frozenset(partitions),
        last_update_ms,
        start_ms,
        previous_producer_id=_INT64.unpack(tags[0])[0] if len(tags.get(0, b"")) == 8 else -1,
        next_producer_id=_INT64.unpack(tags[1])[0] if len(tags.get(1, b"")) == 8 else -1,
        client_transaction_version=_INT16.unpack(tags[2])[0] if len(tags.get(2, b"")) == 2 else 0,
    )
