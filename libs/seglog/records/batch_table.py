"""The per-batch table the append path's C scan leaves behind (records/_scan.c: scan_append,
scan_follower), and what reads it off the hot path.

One 40-byte entry per batch, native byte order, struct format "=qqqiiihh":
position, baseOffset (as the input says), maxTimestamp, size (batchLength + 12),
lastOffsetDelta, partitionLeaderEpoch, attributes, flags (ENTRY_PRODUCER: producerId >= 0).
The table is a bytes object: the hot path hands it from C call to C call (index_entries,
write_batches) and never unpacks it in Python; only the rare paths (LogAppendTime,
idempotent producers, batches whose epochs differ, recovery) read entries here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from .batch import BatchHeader, read_header

ENTRY = struct.Struct("=qqqiiihh")
ENTRY_PRODUCER = 1
# A scan's summary flags: some batch has a producer id; the batches' epochs differ.
HAS_PRODUCER = 1
EPOCHS_VARY = 2
HAS_CONTROL = 4  # set by validation (storage/validation.py), not by the C scan


class TableEntry(NamedTuple):
    position: int
    base_offset: int
    max_timestamp: int
    size: int
    last_offset_delta: int
    partition_leader_epoch: int
    attributes: int
    flags: int


def entries(table: bytes) -> list[TableEntry]:
    return [TableEntry._make(fields) for fields in ENTRY.iter_unpack(table)]


def entry(table: bytes, index: int) -> TableEntry:
    """Entry `index` (negative counts from the end)."""
    if index < 0:
        index += len(table) // ENTRY.size
    return TableEntry._make(ENTRY.unpack_from(table, index * ENTRY.size))


def batch_count(table: bytes) -> int:
    return len(table) // ENTRY.size


def headers(view: memoryview, table: bytes) -> list[tuple[int, BatchHeader]]:
    """(position, header) of each batch, read from the input."""
    return [(fields[0], read_header(view, fields[0])) for fields in ENTRY.iter_unpack(table)]


def table_of(batches: Iterable[tuple[int, int, int]]) -> bytes:
    """A table for batches known only by (size, last offset, max timestamp), each batch
    written as holding its last offset alone (base offset = last offset, delta 0): what
    the index bookkeeping needs of a batch, for appends that do not come from a scan."""
    position = 0
    parts = []
    for size, last_offset, max_timestamp in batches:
        parts.append(ENTRY.pack(position, last_offset, max_timestamp, size, 0, 0, 0, 0))
        position += size
    return b"".join(parts)
