"""Producer-state snapshot files (`<20-digit offset>.snapshot` beside the segments): Kafka's
format (ProducerStateManager.writeSnapshot/readSnapshot, version 1), big-endian:

    int16  version = 1
    uint32 crc       CRC-32C of everything after it
    int32  count
    count x { int64 producer_id, int16 epoch, int32 last_sequence, int64 last_offset,
              int32 offset_delta (last offset - first offset of the last batch),
              int64 timestamp, int32 coordinator_epoch (-1: none),
              int64 current_txn_first_offset (-1: no open transaction) }     46 bytes

Only each producer's last batch is kept (Kafka's rule: a reloaded producer dedupes against
that one batch, later batches replayed from the log join it); an open transaction's first
offset and the last marker's coordinator epoch are kept, so a load knows the transactions
still open without reading the log before the snapshot.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, count
_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp_ms: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode(entries: list[SnapshotEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(_ENTRY.pack(*e) for e in entries)
    return struct.pack(">hI", VERSION, crc32c.crc32c(body)) + body


def decode(data: bytes) -> list[SnapshotEntry]:
    """The entries; ValueError or struct.error when the file is not a valid snapshot."""
    version, crc, count = _HEAD.unpack_from(data)
    if version != VERSION:
        raise ValueError(f"unknown version {version}")
    if crc32c.crc32c(data[6:]) != crc:
        raise ValueError("CRC mismatch")
    if len(data) != _HEAD.size + count * _ENTRY.size:
        raise ValueError(f"{count} entries declared, {len(data)} bytes")
    return [
        SnapshotEntry._make(_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size))
        for i in range(count)
    ]
