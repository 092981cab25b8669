"""A fetch's partitions and where their bytes lie: what the wait learns per partition
(FetchState), and the chunks an answer is made of (FetchChunk: Kafka's FetchDataInfo, a
segment and file range, not read yet), cut from the log by `read_chunks`: whole batches as
stored, at most `chunk_bytes` per chunk (a single larger batch travels alone), at most the
partition's and the request's max bytes (but one batch), every requested partition with at
least one chunk carrying its watermarks, or its error. The gRPC path reads a chunk's bytes
once to send them; the bulk path sends them from the file."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from seglog.errors import SeglogError
from seglog.metrics import RequestMetrics, error_reason
from seglog.storage import Log
from seglog.storage.log import LogSlice
from seglog.storage.log_reads import ReadPosition
from seglog.storage.txn_index import AbortedTxn

CONSUMER = -1  # the replica id of a client fetch
READ_COMMITTED = 1  # FetchRequest.isolation_level (Kafka's)

logger = logging.getLogger(__name__)


@dataclass
class FetchState:
    """One partition of a fetch: what was asked, and what the wait learned."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    log: Log | None
    error: SeglogError | None = None
    position: ReadPosition | None = None  # where `offset` was found, reused while waiting
    replica_id: int = CONSUMER
    diverging: tuple[int, int] | None = None  # (epoch, end offset) answered to a follower
    isolation_level: int = 0

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED and self.replica_id < 0

    def max_offset(self) -> int | None:
        """Consumers read below the high watermark (read_committed ones: below the last
        stable offset); followers to the log end."""
        if self.replica_id >= 0 or self.log is None:
            return None
        return self.log.last_stable_offset if self.read_committed else self.log.high_watermark


@dataclass(frozen=True)
class FetchChunk:
    """Where whole batches of one partition lie (segment, position, size: Kafka's
    FetchDataInfo; not read yet), or its error, with the watermarks the read saw. The gRPC
    path reads the bytes once to send them; a bulk path can send them from the file."""

    topic: str
    partition: int
    high_watermark: int
    log_start_offset: int
    found: LogSlice | None = None
    error: SeglogError | None = None
    diverging: tuple[int, int] | None = None
    last_stable_offset: int = -1
    aborted: tuple[AbortedTxn, ...] = ()  # read_committed: the transactions aborted in range

    def read(self) -> bytes:
        return b"" if self.found is None else self.found.read()

    @property
    def segment_base_offset(self) -> int:
        if self.found is None or self.found.segment_slice is None:
            return 0
        return self.found.segment_slice.segment.base_offset


def available_bytes(states: list[FetchState], enough: int) -> int:
    """Bytes ready to send, counted from file positions until `enough` (errors and diverging
    answers count: they answer at once)."""
    total = 0
    for state in states:
        if state.error is not None or state.diverging is not None:
            return enough
        log = state.log
        assert log is not None
        max_offset = state.max_offset()
        upper = log.log_end_offset if max_offset is None else max_offset
        if state.offset >= upper and state.offset <= log.log_end_offset:
            continue
        if enough <= 1 or not log.log_start_offset <= state.offset <= log.log_end_offset:
            return enough  # data, or an out-of-range error to answer now
        state.position = log.bytes_from(state.offset, state.position, max_offset=max_offset)
        total += max(state.position.available_bytes, 1)
        if total >= enough:
            return total
    return total


def read_chunks(states: list[FetchState], max_bytes: int, chunk_bytes: int) -> Iterator[FetchChunk]:
    budget = max_bytes
    sent_data = False
    for state in states:
        if state.error is not None:
            yield _error_chunk(state, state.error)
            continue
        log = state.log
        assert log is not None
        if state.diverging is not None:
            yield FetchChunk(
                state.topic,
                state.partition,
                log.high_watermark,
                log.log_start_offset,
                diverging=state.diverging,
                last_stable_offset=log.last_stable_offset,
            )
            continue
        offset = state.offset
        partition_budget = state.max_bytes
        chunks = 0
        while True:
            limit = min(chunk_bytes, partition_budget, budget)
            try:
                found = log.locate_records(
                    offset,
                    max(limit, 0),
                    min_one_message=not sent_data,
                    max_offset=state.max_offset(),
                )
            except SeglogError as exc:
                if chunks == 0:
                    if state.replica_id == CONSUMER:
                        logger.info(
                            "%s-%d: consumer fetch at %d refused: %s",
                            state.topic,
                            state.partition,
                            offset,
                            exc,
                        )
                    yield _error_chunk(state, exc)
                    chunks += 1
                break
            if found.size or chunks == 0:
                aborted: tuple[AbortedTxn, ...] = ()
                if state.read_committed and found.size:  # Kafka's addAbortedTransactions
                    aborted = tuple(log.aborted_transactions(offset, found.next_offset))
                yield FetchChunk(
                    state.topic,
                    state.partition,
                    log.high_watermark,
                    found.log_start_offset,
                    found,
                    last_stable_offset=log.last_stable_offset,
                    aborted=aborted,
                )
                chunks += 1
            if not found.size:
                break
            sent_data = True
            offset = found.next_offset
            partition_budget -= found.size
            budget -= found.size
            if partition_budget <= 0 or budget <= 0 or offset >= found.high_watermark:
                break


def _error_chunk(state: FetchState, error: SeglogError) -> FetchChunk:
    hw = start = stable = -1
    if state.log is not None:
        hw, start = state.log.high_watermark, state.log.log_start_offset
        stable = state.log.last_stable_offset
    return FetchChunk(state.topic, state.partition, hw, start, None, error, None, stable)


def counted(
    chunks: Iterable[FetchChunk],
    metrics: RequestMetrics,
    kind: str,
    started: float,
    for_replica: bool,
) -> Iterable[FetchChunk]:
    """The chunks of one fetch, counted when the fetch ends (one update per request): bytes
    and messages per topic for consumers (messages: the offsets the batches sent span), and
    the errors answered. With metrics off, the chunks as they are."""
    if not metrics.on:
        return chunks
    return _counting(chunks, metrics, kind, started, for_replica)


def _counting(
    chunks: Iterable[FetchChunk],
    metrics: RequestMetrics,
    kind: str,
    started: float,
    for_replica: bool,
) -> Iterator[FetchChunk]:
    per_topic: dict[str, list[int]] = {}
    errors: dict[str, int] = {}
    try:
        for chunk in chunks:
            if chunk.error is not None:
                reason = error_reason(chunk.error)
                errors[reason] = errors.get(reason, 0) + 1
            elif chunk.found is not None and chunk.found.segment_slice is not None:
                piece = chunk.found.segment_slice
                counts = per_topic.setdefault(chunk.topic, [0, 0])
                counts[0] += piece.next_offset - piece.first_batch_base_offset
                counts[1] += piece.size
            yield chunk
    finally:
        if not for_replica:
            metrics.consumed(per_topic)
        metrics.request(kind, started, errors)
