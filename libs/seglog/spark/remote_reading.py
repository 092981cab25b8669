"""A Spark task's read of copied segments straight from the object store (remote_planning.py
plans them): ranged GETs of each piece's bytes, a few in flight at once, decoded into Arrow
batches as the cluster's bytes are (reading.decode_into), with no broker on the way.

A piece is a byte range of one segment's `segment.log` (remote_layout.py) holding the offsets
[start_offset, end_offset): it starts at an indexed batch at or before start_offset and ends
past the last batch below end_offset; the batches outside the offsets are skipped, as a
fetch's are. The bytes come in chunks of CHUNK_BYTES; a batch cut by a chunk's end waits
for the next chunk (only the fixed batch header is read to find where batches end: baseOffset
int64, batchLength int32, then the batch; DESIGN.md).

A partition's local tail (what is still only on the nodes, past its copied segments) is read
by its last store task, through the cluster, after the store's pieces (`tail`): a task of its
own cost Spark a task's start (a worker's round trip, the reader's unpickling, a first
fetch) for a few MiB, on every partition.

Failures: a segment deleted by remote retention since the plan is data loss (failOnDataLoss,
as a log start moving past a planned range); any other store error is retried
GET_ATTEMPTS times with a backoff, then fails the task (Spark may run it again).
"""

from __future__ import annotations

import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from ..errors import CorruptRecordError
from ..records.batch import LOG_OVERHEAD
from ..storage.remote_layout import SEGMENT_LOG, SegmentKey, segment_object
from ..storage.remote_store import (
    RemoteObjectNotFoundError,
    RemoteStorageConfig,
    RemoteStorageError,
    RemoteStore,
)
from .columns import ArrowColumns, ArrowRows, Collector
from .planning import report_data_loss
from .reading import RangeRead, decode_into, read_range

# One GET's bytes, and how many are in flight per task: a GET's latency (tens of ms on a
# loaded machine) is hidden behind the decoding of the chunks before it. Not smaller: a GET
# costs about 2 ms of the worker's CPU and 4 ms of SeaweedFS's whatever its size (measured:
# client + store 1.4 ms per MiB at 8 MiB, 2.9 at 2 MiB, 5.3 at 1 MiB), and on a machine
# whose cores Spark keeps busy that CPU is the read's cost.
CHUNK_BYTES = 8 * 1024 * 1024
# A task's first GET is smaller: Spark's JVM waits for the task's first batch (columns.py),
# and the first 1000 rows come out of 1 MiB sooner than out of 8 (~5 ms against ~20 a task
# on the bench); the GETs after it are in flight meanwhile.
FIRST_CHUNK_BYTES = 1024 * 1024
GETS_IN_FLIGHT = 3
GET_ATTEMPTS = 4
GET_BACKOFF_S = 0.2
_LENGTH = struct.Struct(">i")  # batchLength, at 8 in a batch


@dataclass(frozen=True)
class SegmentPiece:
    """Offsets [start_offset, end_offset) of one copied segment, found in its log's bytes
    [start_position, end_position)."""

    segment: SegmentKey
    start_offset: int
    end_offset: int
    start_position: int
    end_position: int


@dataclass(frozen=True)
class RemoteRangeRead:
    """A task reading [start, end) of one partition from the store, piece by piece."""

    storage: RemoteStorageConfig
    topic: str
    partition: int
    start: int
    end: int
    pieces: tuple[SegmentPiece, ...]
    include_headers: bool
    fail_on_data_loss: bool
    # The partition's local tail, [pieces' end, end), read through the cluster afterwards.
    tail: RangeRead | None = None


# One store client per configuration in each worker process (Spark reuses its workers).
_stores: dict[RemoteStorageConfig, RemoteStore] = {}
_stores_lock = threading.Lock()


def store_for(config: RemoteStorageConfig) -> RemoteStore:
    with _stores_lock:
        found = _stores.get(config)
        if found is None:
            found = _stores[config] = RemoteStore(config)
        return found


def read_remote_range(task: RemoteRangeRead) -> Iterator[pa.RecordBatch]:
    store = store_for(task.storage)
    rows: Collector = (
        ArrowRows(task.topic, task.partition)
        if task.include_headers
        else ArrowColumns(task.topic, task.partition)
    )
    with ThreadPoolExecutor(GETS_IN_FLIGHT, thread_name_prefix="seglog-spark-get") as pool:
        for n, piece in enumerate(task.pieces):
            first_bytes = min(FIRST_CHUNK_BYTES, CHUNK_BYTES) if n == 0 else CHUNK_BYTES
            try:
                yield from _read_piece(store, pool, piece, rows, first_bytes)
            except RemoteObjectNotFoundError:
                report_data_loss(
                    f"{task.topic}-{task.partition}: offsets [{piece.start_offset}, "
                    f"{piece.end_offset}) were to be read from the object store but their "
                    "segment was deleted (remote retention) since the read was planned",
                    task.fail_on_data_loss,
                )
    if task.tail is not None:  # into the same collector: no short batch between the two
        yield from read_range(task.tail, rows)
    elif rows.rows:
        yield rows.take()


def _read_piece(
    store: RemoteStore,
    pool: ThreadPoolExecutor,
    piece: SegmentPiece,
    rows: Collector,
    first_bytes: int,
) -> Iterator[pa.RecordBatch]:
    key = segment_object(piece.segment, SEGMENT_LOG)
    starts = _ranges(piece.start_position, piece.end_position, first_bytes)
    in_flight: deque[Future[bytes]] = deque()

    def more() -> None:
        for at, length in starts:
            in_flight.append(pool.submit(_get, store, key, at, length))
            return

    for _ in range(GETS_IN_FLIGHT):
        more()
    carried = b""
    reached = [piece.start_offset]
    try:
        while in_flight and reached[0] < piece.end_offset:
            chunk = in_flight.popleft().result()
            more()
            data = carried + chunk if carried else chunk
            whole = _whole_batches(data)
            yield from decode_into(rows, memoryview(data)[:whole], reached, piece.end_offset)
            carried = data[whole:]
            if not chunk:
                break  # the object is shorter than planned: what it holds was read
    finally:
        for future in in_flight:
            future.cancel()


def _ranges(start: int, end: int, first_bytes: int) -> Iterator[tuple[int, int]]:
    """(position, length) of each GET of [start, end): `first_bytes`, then CHUNK_BYTES."""
    at, size = start, first_bytes
    while at < end:
        length = min(size, end - at)
        yield at, length
        at, size = at + length, CHUNK_BYTES


def _whole_batches(data: bytes) -> int:
    """How many leading bytes of `data` are whole batches (one header read per batch)."""
    at = 0
    while at + LOG_OVERHEAD <= len(data):
        (length,) = _LENGTH.unpack_from(data, at + 8)
        if length < 0:
            raise CorruptRecordError(f"remote batch with a negative length {length}")
        if at + LOG_OVERHEAD + length > len(data):
            break
        at += LOG_OVERHEAD + length
    return at


def _get(store: RemoteStore, key: str, position: int, length: int) -> bytes:
    for attempt in range(GET_ATTEMPTS):
        try:
            return store.get_range(key, position, length)
        except RemoteObjectNotFoundError:
            raise
        except RemoteStorageError:
            if attempt == GET_ATTEMPTS - 1:
                raise
            time.sleep(GET_BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable")
