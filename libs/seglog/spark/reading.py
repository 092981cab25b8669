"""A Spark task's read: the records of one partition's offset range as Arrow record batches,
inside a Python worker.

The bytes come as the consumer's do — the leader's bulk port with a grant from the gateway
(client/bulk.py), else the gateway's gRPC Fetch — through one gateway channel and one bulk
reader per worker process, kept across tasks (Spark reuses its Python workers), so a task
does not pay for connecting. Batches are decoded by the C decoder; the columns are built
from its records in a few whole-list passes per Arrow batch, never a Python loop per record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ..client.bulk import BulkMessage, BulkReader
from ..client.gateway import EARLIEST, FetchPosition, GatewayClient
from ..client.structs import TopicPartition
from ..errors import OffsetOutOfRangeError, SeglogError
from ..records import Record, iter_batches
from ..records.legacy import LegacyMessage, records_of
from ..rpc.status import error_from_code
from ..v1 import common_pb2
from .planning import report_data_loss

logger = logging.getLogger(__name__)

ROWS_PER_ARROW_BATCH = 10_000  # SPARK.md: ~10k rows per batch is the API's best
FETCH_PARTITION_MAX_BYTES = 8 * 1024 * 1024
FETCH_MAX_WAIT_MS = 500
RETRY_BACKOFF_S = 0.1

HEADER_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the source's Spark schema, as Spark checks it (every field
    nullable, microsecond UTC timestamps, 32-bit ints)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


@dataclass(frozen=True)
class RangeRead:
    """What a task reads, with everything it needs (it runs in another process)."""

    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    request_timeout_ms: int
    fetch_transport: str


# One gateway client and bulk reader per (bootstrap, timeout) in each worker process.
_connections: dict[tuple[str, int], tuple[GatewayClient, BulkReader]] = {}
_connections_lock = threading.Lock()


def connections(bootstrap: str, request_timeout_ms: int) -> tuple[GatewayClient, BulkReader]:
    key = (bootstrap, request_timeout_ms)
    with _connections_lock:
        found = _connections.get(key)
        if found is None:
            client = GatewayClient(bootstrap, timeout_s=request_timeout_ms / 1000)
            security = client.security
            bulk = BulkReader(
                client._stub,
                request_timeout_ms / 1000,
                ssl_context=None if security is None else security.ssl_context(),
            )
            found = _connections[key] = (client, bulk)
        return found


def drop_connections(bootstrap: str, request_timeout_ms: int) -> None:
    """After a failure the next task connects afresh (a gateway restarted elsewhere)."""
    with _connections_lock:
        found = _connections.pop((bootstrap, request_timeout_ms), None)
    if found is not None:
        found[1].close()
        found[0].close()


class ArrowRows:
    """Records gathered into Arrow record batches of the source's schema."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.schema = arrow_schema(include_headers)
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._records: list[Record] = []

    def __len__(self) -> int:
        return len(self._records)

    def add(self, records: list[Record]) -> None:
        self._records += records

    def take(self) -> pa.RecordBatch:
        records, self._records = self._records, []
        count = len(records)
        offsets, timestamps, keys, values, headers, _, _, types = zip(*records, strict=True)
        arrays = [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.partition, pa.int32()), count),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
            pa.array(types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(_headers_array(headers))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _headers_array(headers: tuple[tuple[tuple[str, bytes | None], ...], ...]) -> pa.Array:
    lengths = [len(h) for h in headers]
    flat = [pair for h in headers for pair in h]
    starts = [0]
    total = 0
    for n in lengths:  # one add per record: the list offsets Arrow needs
        total += n
        starts.append(total)
    keys, values = zip(*flat, strict=True) if flat else ((), ())
    items = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
        fields=list(HEADER_TYPE.value_type),
    )
    return pa.ListArray.from_arrays(pa.array(starts, pa.int32()), items, type=HEADER_TYPE)


def read_range(task: RangeRead) -> Iterator[pa.RecordBatch]:
    """Every record of [start, end) in offset order, as Arrow batches of about
    ROWS_PER_ARROW_BATCH rows. Offsets below the log start are data loss (failOnDataLoss);
    offsets not yet readable (past the high watermark) are waited for up to the request
    timeout, then fail with a message naming them."""
    try:
        yield from _read_range(task)
    except (SeglogError, OSError):
        drop_connections(task.bootstrap, task.request_timeout_ms)
        raise


def _read_range(task: RangeRead) -> Iterator[pa.RecordBatch]:
    client, bulk = connections(task.bootstrap, task.request_timeout_ms)
    tp = TopicPartition(task.topic, task.partition)
    rows = ArrowRows(task.topic, task.partition, task.include_headers)
    offset = task.start
    patience_s = task.request_timeout_ms / 1000
    stalled_since: float | None = None
    high_watermark = -1
    while offset < task.end:
        messages = _fetch(client, bulk, tp, offset, task.fetch_transport)
        before = offset
        for message in messages:
            if message.error:
                error = error_from_code(message.error, message.error_message)
                if isinstance(error, OffsetOutOfRangeError):
                    offset = _past_lost_records(client, tp, offset, task)
                    break
                if not error.retriable:
                    raise error
                continue
            high_watermark = message.high_watermark
            offset = _decode_into(rows, message.records, offset, task.end)
            while len(rows) >= ROWS_PER_ARROW_BATCH:
                yield rows.take()
        if offset > before:
            stalled_since = None
            continue
        now = time.monotonic()
        if stalled_since is None:
            stalled_since = now
        elif now - stalled_since > patience_s:
            raise TimeoutError(
                f"{task.topic}-{task.partition}: nothing readable at offset {offset} within "
                f"{patience_s:g} s (the task reads up to {task.end}; the high watermark is "
                f"{high_watermark})"
            )
        time.sleep(RETRY_BACKOFF_S)
    if len(rows):
        yield rows.take()


def _past_lost_records(
    client: GatewayClient, tp: TopicPartition, offset: int, task: RangeRead
) -> int:
    """OFFSET_OUT_OF_RANGE: below the log start, the records are gone (data loss); past the
    log end, the range was planned beyond what the partition holds."""
    (result,) = client.list_offsets(tp.topic, {tp.partition: EARLIEST}).values()
    if result.error:
        raise error_from_code(result.error, result.error_message)
    if offset < result.offset:
        report_data_loss(
            f"{tp.topic}-{tp.partition}: offsets [{offset}, {min(result.offset, task.end)}) were "
            f"to be read but the log now starts at {result.offset}",
            task.fail_on_data_loss,
        )
        return min(result.offset, task.end)
    report_data_loss(
        f"{tp.topic}-{tp.partition}: offset {offset} is past the log end (the partition was "
        "truncated or re-created)",
        task.fail_on_data_loss,
    )
    return task.end


def _decode_into(rows: ArrowRows, records: bytes | memoryview, offset: int, end: int) -> int:
    """Add the records of [offset, end) in `records` to `rows`; the offset reached."""
    topic, partition = rows.topic, rows.partition
    for batch in iter_batches(records):
        if isinstance(batch, LegacyMessage):
            decoded = [r._replace(topic=topic, partition=partition) for r in records_of(batch)]
            next_offset = batch.offset + 1
        else:
            header = batch.header
            next_offset = header.last_offset + 1
            if header.is_control or next_offset <= offset:
                offset = max(offset, next_offset)
                continue
            decoded = batch.records(topic, partition)
        if decoded and (decoded[0].offset < offset or decoded[-1].offset >= end):
            decoded = [r for r in decoded if offset <= r.offset < end]
        rows.add(decoded)
        offset = max(offset, next_offset)
        if offset >= end:
            return offset
    return offset


def _fetch(
    client: GatewayClient,
    bulk: BulkReader,
    tp: TopicPartition,
    offset: int,
    transport: str,
) -> list[common_pb2.FetchResponse | BulkMessage]:
    """One fetch of the partition at `offset`: from its leader's bulk port when a grant
    covers it, else through the gateway."""
    messages: list[common_pb2.FetchResponse | BulkMessage] = []
    if transport != "grpc":

        def keep(message: BulkMessage) -> bool:
            messages.append(message)
            return False

        rest, _ = bulk.fetch([(tp, offset)], _request, keep)
        if not rest or transport == "bulk":
            return messages
    position = FetchPosition(tp.topic, tp.partition, offset, FETCH_PARTITION_MAX_BYTES)
    messages += client.fetch(
        [position], max_wait_ms=FETCH_MAX_WAIT_MS, max_bytes=FETCH_PARTITION_MAX_BYTES
    )
    return messages


def _request(
    partitions: list[tuple[TopicPartition, int]], *, wait: bool
) -> common_pb2.FetchRequest:
    request = common_pb2.FetchRequest(
        min_bytes=1,
        max_wait_ms=FETCH_MAX_WAIT_MS if wait else 0,
        max_bytes=FETCH_PARTITION_MAX_BYTES,
    )
    for tp, offset in partitions:
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            fetch_offset=offset,
            partition_max_bytes=FETCH_PARTITION_MAX_BYTES,
        )
    return request
