"""Walking a buffer of batches: what a fetch returns, or a piece of a `.log` file.

Only headers are read while walking; records are decoded when the caller asks. A buffer may
hold v2 batches and legacy (magic 0/1) entries side by side, as a log written by old brokers
does; magic sits at byte 16 in every version, so the walk reads it to pick the parser.

A fetch may end with a partial batch (a broker cuts at max_bytes, as Kafka's does): the walk
stops there quietly. The storage engine's own scans use `FileRecords`, which treats a partial
tail as the torn end of a crash instead.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from ..errors import CorruptRecordError
from .batch import LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2, RecordBatch
from .legacy import LegacyMessage, read_message, records_of
from .record import Record


def iter_batches(
    buffer: bytes | bytearray | memoryview, *, validate: bool = True, start: int = 0
) -> Iterator[RecordBatch | LegacyMessage]:
    """Yield each complete batch (v2) or legacy entry from position `start` on, CRC-checked
    when `validate`."""
    pos = start
    end = len(buffer)
    while end - pos > MAGIC_OFFSET:
        (length,) = struct.unpack_from(">i", buffer, pos + 8)
        if length < 0:
            raise CorruptRecordError(f"batch at position {pos}: negative length {length}")
        if pos + LOG_OVERHEAD + length > end:
            return
        magic = buffer[pos + MAGIC_OFFSET]
        if magic == MAGIC_V2:
            batch = RecordBatch(buffer, pos)
            if validate:
                batch.validate()
            yield batch
        elif magic in (0, 1):
            yield read_message(buffer, pos)
        else:
            raise CorruptRecordError(f"entry at position {pos}: unknown magic {magic}")
        pos += LOG_OVERHEAD + length


def iter_records(
    buffer: bytes | bytearray | memoryview, *, validate: bool = True
) -> Iterator[Record]:
    """Every record in the buffer, legacy entries up-read, in order."""
    for entry in iter_batches(buffer, validate=validate):
        if isinstance(entry, RecordBatch):
            yield from entry.records()
        else:
            yield from records_of(entry)
