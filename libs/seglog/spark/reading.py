"""A Spark task's read: the records of one partition's offset range as Arrow record batches,
inside a Python worker.

The bytes come as the consumer's do — the leader's bulk port with a grant from the gateway
(client/bulk.py over rpc/bulk_client.py), else the gateway's gRPC Fetch — through one
gateway channel and one bulk reader per worker process, kept across tasks (Spark reuses its
Python workers), so a task does not pay for connecting. Batches are decoded straight into
Arrow's column buffers (columns.py), never one Python object per record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from ..client.bulk import BulkReader
from ..client.fetched import fetch_request, next_offset_after
from ..client.gateway import FetchPosition, GatewayClient, leader_range
from ..client.structs import TopicPartition
from ..errors import OffsetOutOfRangeError, SeglogError
from ..records import iter_batches
from ..records.legacy import LegacyMessage, records_of
from ..rpc.bulk_client import BulkMessage
from ..rpc.status import error_from_code
from ..v1 import common_pb2
from .columns import ArrowColumns, ArrowRows, Collector
from .planning import report_data_loss

logger = logging.getLogger(__name__)

FETCH_PARTITION_MAX_BYTES = 8 * 1024 * 1024
FETCH_MAX_WAIT_MS = 500
RETRY_BACKOFF_S = 0.1


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


def read_range(task: RangeRead, rows: Collector | None = None) -> Iterator[pa.RecordBatch]:
    """Every record of [start, end) in offset order, as Arrow batches of about
    ROWS_PER_ARROW_BATCH rows, added to `rows` when given (the rows read before it, by the
    same task, that did not fill a batch). Offsets below the log start are data loss
    (failOnDataLoss); offsets not yet readable (past the high watermark) are waited for up
    to the request timeout, then fail with a message naming them."""
    try:
        yield from _read_range(task, rows)
    except (SeglogError, OSError):
        drop_connections(task.bootstrap, task.request_timeout_ms)
        raise


def _read_range(task: RangeRead, rows: Collector | None) -> Iterator[pa.RecordBatch]:
    client, bulk = connections(task.bootstrap, task.request_timeout_ms)
    tp = TopicPartition(task.topic, task.partition)
    if rows is None:
        rows = (
            ArrowRows(task.topic, task.partition)
            if task.include_headers
            else ArrowColumns(task.topic, task.partition)
        )
    offset = task.start
    patience_s = task.request_timeout_ms / 1000
    stalled_since: float | None = None
    high_watermark = -1
    # One fetch ahead: the next chunk crosses the network (the receive lets the GIL go)
    # while this one is decoded.
    with ThreadPoolExecutor(1, thread_name_prefix="seglog-spark-fetch") as fetcher:
        ahead = fetcher.submit(_fetch, client, bulk, tp, offset, task.fetch_transport)
        while offset < task.end:
            messages = ahead.result()
            after = _offset_after(messages, offset)
            if after is not None and after < task.end:
                ahead = fetcher.submit(_fetch, client, bulk, tp, after, task.fetch_transport)
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
                reached = [offset]
                yield from decode_into(rows, message.records, reached, task.end)
                offset = reached[0]
            if offset >= task.end:
                break
            if offset > before:
                stalled_since = None
            else:
                now = time.monotonic()
                if stalled_since is None:
                    stalled_since = now
                elif now - stalled_since > patience_s:
                    raise TimeoutError(
                        f"{task.topic}-{task.partition}: nothing readable at offset {offset} "
                        f"within {patience_s:g} s (the task reads up to {task.end}; the high "
                        f"watermark is {high_watermark})"
                    )
                time.sleep(RETRY_BACKOFF_S)
            if after != offset:  # the fetch ahead (if any) asked for another offset
                if after is not None and after < task.end:
                    ahead.result()
                ahead = fetcher.submit(_fetch, client, bulk, tp, offset, task.fetch_transport)
    if rows.rows:
        yield rows.take()


def _offset_after(
    messages: list[common_pb2.FetchResponse | BulkMessage], offset: int
) -> int | None:
    """Where the fetch after these messages starts (headers only), or None when they carry
    an error or nothing: then the next fetch waits for what decoding them decides."""
    after = offset
    for message in messages:
        if message.error:
            return None
        if message.records:
            after = next_offset_after(message.records, after)
    return None if after == offset else after


def _past_lost_records(
    client: GatewayClient, tp: TopicPartition, offset: int, task: RangeRead
) -> int:
    """OFFSET_OUT_OF_RANGE: below the log start, the records are gone (data loss); past the
    log end, the range was planned beyond what the partition holds. Believed only when the
    leader, asked again, confirms it (as the consumer does): when its range holds the offset,
    the read goes on from there."""
    earliest, latest = leader_range(client, tp)
    if earliest <= offset <= latest:
        return offset
    if offset < earliest:
        report_data_loss(
            f"{tp.topic}-{tp.partition}: offsets [{offset}, {min(earliest, task.end)}) were "
            f"to be read but the log now starts at {earliest}",
            task.fail_on_data_loss,
        )
        return min(earliest, task.end)
    report_data_loss(
        f"{tp.topic}-{tp.partition}: offset {offset} is past the log end (the partition was "
        "truncated or re-created)",
        task.fail_on_data_loss,
    )
    return task.end


def decode_into(
    rows: Collector, records: bytes | memoryview, reached: list[int], end: int
) -> Iterator[pa.RecordBatch]:
    """Add the records of [reached[0], end) in `records` to `rows`, yielding each Arrow
    batch as it fills (up to ROWS_PER_ARROW_BATCH rows, Spark's best size; columns.py says
    why a task's first and last are smaller); `reached[0]`
    follows the offset reached."""
    offset = reached[0]
    for batch in iter_batches(records):
        if isinstance(batch, LegacyMessage):
            rows.add_records([r for r in records_of(batch) if offset <= r.offset < end])
            next_offset = batch.offset + 1
        else:
            header = batch.header
            next_offset = header.last_offset + 1
            if header.is_control or next_offset <= offset:
                offset = reached[0] = max(offset, next_offset)
                continue
            rows.add_batch(batch, offset, end)
        offset = reached[0] = max(offset, next_offset)
        if rows.full(end - offset):
            yield rows.take()
        if offset >= end:
            return


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
    return fetch_request(
        partitions,
        min_bytes=1,
        max_wait_ms=FETCH_MAX_WAIT_MS if wait else 0,
        max_bytes=FETCH_PARTITION_MAX_BYTES,
        partition_max_bytes=FETCH_PARTITION_MAX_BYTES,
    )
