"""Kafka's records in `__share_group_state` (share-coordinator/src/main/resources/common/
message/Share{Snapshot,Update}{Key,Value}.json, Kafka 4.3), written and read byte for byte.
Big-endian. A coordinator record's key and value each start with an int16: the key's is the
record type (0 ShareSnapshot, 1 ShareUpdate), the value's its version (0).

    ShareSnapshotKey / ShareUpdateKey (not flexible)
        int16 type, string group_id (int16 length + UTF-8), uuid topic_id (16 bytes),
        int32 partition
    ShareSnapshotValue v0 (flexible)
        int16 0, int32 snapshot_epoch, int32 state_epoch, int32 leader_epoch,
        int64 start_offset, int64 create_timestamp, int64 write_timestamp,
        state_batches: compact array (unsigned varint count + 1) of
            int64 first_offset, int64 last_offset, int8 delivery_state, int16 delivery_count,
            tagged fields (unsigned varint count, then tag, size, data each)
        tagged fields: tag 0 int32 delivery_complete_count (KIP-1226; -1 when absent)
    ShareUpdateValue v0 (flexible)
        int16 0, int32 snapshot_epoch, int32 leader_epoch, int64 start_offset (-1: unchanged),
        state_batches as above, tagged fields as above

Delivery states: 0 available, 2 acknowledged, 4 archived. seglog writes a ShareSnapshot on
every change (its in-flight records are at most group.share.partition.max.record.locks, a
few KB of ranges), so the newest record of a key is the whole state; it reads ShareUpdates
too (applied over the snapshot before them, as Kafka's ShareCoordinatorShard replays them),
so a topic Kafka wrote reads back. A null value deletes the key's state.
"""

from __future__ import annotations

import base64
import struct
import uuid
from bisect import bisect_right
from dataclasses import dataclass

from seglog.errors import CorruptRecordError

from .share_partition import StateBatch

SNAPSHOT_TYPE, UPDATE_TYPE = 0, 1
VALUE_VERSION = 0
_KEY_HEAD = struct.Struct(">hh")
_KEY_TAIL = struct.Struct(">16si")
_SNAPSHOT_HEAD = struct.Struct(">hiiiqqq")
_UPDATE_HEAD = struct.Struct(">hiiq")
_BATCH = struct.Struct(">qqbh")
DELIVERY_COMPLETE_TAG = 0


@dataclass(frozen=True)
class StateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True)
class ShareState:
    """A share partition's state as a snapshot writes it (an update sets what it names)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp_ms: int
    write_timestamp_ms: int
    state_batches: tuple[StateBatch, ...]


def topic_uuid(topic_id: str) -> uuid.UUID:
    """A topic id in Uuid.toString's form (the registry's: URL-safe base64 of its 16 bytes)
    as the key writes it."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


def encode_key(key: StateKey, record_type: int = SNAPSHOT_TYPE) -> bytes:
    group = key.group_id.encode()
    return (
        _KEY_HEAD.pack(record_type, len(group))
        + group
        + _KEY_TAIL.pack(key.topic_id.bytes, key.partition)
    )


def decode_key(data: bytes) -> tuple[int, StateKey]:
    try:
        record_type, length = _KEY_HEAD.unpack_from(data)
        if record_type not in (SNAPSHOT_TYPE, UPDATE_TYPE) or length < 0:
            raise CorruptRecordError(f"not a share state key (type {record_type})")
        end = _KEY_HEAD.size + length
        group = data[_KEY_HEAD.size : end].decode()
        topic_bytes, partition = _KEY_TAIL.unpack_from(data, end)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"share state key: {exc}") from None
    return record_type, StateKey(group, uuid.UUID(bytes=topic_bytes), partition)


def encode_snapshot(state: ShareState, delivery_complete_count: int = -1) -> bytes:
    out = bytearray(
        _SNAPSHOT_HEAD.pack(
            VALUE_VERSION,
            state.snapshot_epoch,
            state.state_epoch,
            state.leader_epoch,
            state.start_offset,
            state.create_timestamp_ms,
            state.write_timestamp_ms,
        )
    )
    _write_batches(out, state.state_batches)
    _write_tagged_count(out, delivery_complete_count)
    return bytes(out)


def decode_snapshot(data: bytes) -> ShareState:
    try:
        version, snap, state_epoch, leader, start, created, written = _SNAPSHOT_HEAD.unpack_from(
            data
        )
        if version != VALUE_VERSION:
            raise CorruptRecordError(f"ShareSnapshotValue version {version}: 0 only")
        batches, _ = _read_batches(data, _SNAPSHOT_HEAD.size)
    except (struct.error, IndexError) as exc:
        raise CorruptRecordError(f"ShareSnapshotValue: {exc}") from None
    return ShareState(snap, state_epoch, leader, start, created, written, batches)


def decode_update(data: bytes) -> tuple[int, tuple[StateBatch, ...]]:
    """An update's start offset (-1: unchanged) and the batches it sets."""
    try:
        version, _snap, _leader, start = _UPDATE_HEAD.unpack_from(data)
        if version != VALUE_VERSION:
            raise CorruptRecordError(f"ShareUpdateValue version {version}: 0 only")
        batches, _ = _read_batches(data, _UPDATE_HEAD.size)
    except (struct.error, IndexError) as exc:
        raise CorruptRecordError(f"ShareUpdateValue: {exc}") from None
    return start, batches


def apply_update(
    state: ShareState, start_offset: int, batches: tuple[StateBatch, ...]
) -> ShareState:
    """A snapshot with an update applied: its start offset, and its batches laid over the
    snapshot's where they overlap (the update winning), alike neighbours merged. Works on
    ranges: the cost grows with batches, not offsets."""
    start = state.start_offset if start_offset < 0 else start_offset
    laid: list[StateBatch] = []
    for batch in (*state.state_batches, *batches):
        if batch.last_offset >= start:
            _overlay(laid, batch._replace(first_offset=max(batch.first_offset, start)))
    merged: list[StateBatch] = []
    for batch in laid:
        last = merged[-1] if merged else None
        if (
            last
            and last.last_offset == batch.first_offset - 1
            and (last.delivery_state, last.delivery_count)
            == (batch.delivery_state, batch.delivery_count)
        ):
            merged[-1] = last._replace(last_offset=batch.last_offset)
        else:
            merged.append(batch)
    return ShareState(
        state.snapshot_epoch,
        state.state_epoch,
        state.leader_epoch,
        start,
        state.create_timestamp_ms,
        state.write_timestamp_ms,
        tuple(merged),
    )


def laid_over(base: list[StateBatch], over: list[StateBatch]) -> list[StateBatch]:
    """`over` laid over `base` (both sorted, not overlapping within themselves): where they
    overlap `over` wins; sorted and not overlapping."""
    laid: list[StateBatch] = []
    for batch in (*base, *over):
        _overlay(laid, batch)
    return laid


def _overlay(laid: list[StateBatch], batch: StateBatch) -> None:
    """Lay `batch` over `laid` (sorted, not overlapping; kept so): what it covers of the
    batches there is replaced, their parts outside it kept."""
    i = bisect_right(laid, batch.first_offset, key=_first_offset)
    if i > 0 and laid[i - 1].last_offset >= batch.first_offset:
        i -= 1
    j = i
    while j < len(laid) and laid[j].first_offset <= batch.last_offset:
        j += 1
    pieces = [batch]
    if i < j and laid[i].first_offset < batch.first_offset:
        pieces.insert(0, laid[i]._replace(last_offset=batch.first_offset - 1))
    if i < j and laid[j - 1].last_offset > batch.last_offset:
        pieces.append(laid[j - 1]._replace(first_offset=batch.last_offset + 1))
    laid[i:j] = pieces


def _first_offset(batch: StateBatch) -> int:
    return batch.first_offset


# -- the flexible encoding's pieces -----------------------------------------------------------


def _write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):  # an int32's varint is at most 5 bytes
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise CorruptRecordError("varint longer than 5 bytes")


def _write_batches(out: bytearray, batches: tuple[StateBatch, ...]) -> None:
    _write_uvarint(out, len(batches) + 1)
    for batch in batches:
        out += _BATCH.pack(*batch)
        out.append(0)  # no tagged fields


def _write_tagged_count(out: bytearray, delivery_complete_count: int) -> None:
    if delivery_complete_count < 0:
        out.append(0)
        return
    out.append(1)
    _write_uvarint(out, DELIVERY_COMPLETE_TAG)
    _write_uvarint(out, 4)
    out += struct.pack(">i", delivery_complete_count)


def _skip_tagged(data: bytes, pos: int) -> int:
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
    return pos


def _read_batches(data: bytes, pos: int) -> tuple[tuple[StateBatch, ...], int]:
    count, pos = _read_uvarint(data, pos)
    if count == 0:
        return (), pos
    # Each batch is 19 bytes and a tag count: a count beyond what the bytes hold is corrupt,
    # found before anything is allocated for it.
    if (count - 1) * (_BATCH.size + 1) > len(data) - pos:
        raise CorruptRecordError(f"{count - 1} state batches in {len(data) - pos} bytes")
    batches = []
    for _ in range(count - 1):
        first, last, state, delivered = _BATCH.unpack_from(data, pos)
        pos = _skip_tagged(data, pos + _BATCH.size)
        if last < first:
            raise CorruptRecordError(f"state batch {first}..{last}")
        batches.append(StateBatch(first, last, state, delivered))
    return tuple(batches), pos
