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
from seglog.storage.remote_reads import RemoteRead
from seglog.storage.txn_index import AbortedTxn

from .remote_fetches import RemoteFetches

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
    # Batches read from the object store (remote_fetches.py): a view of a cached chunk.
    remote: bytes | memoryview | None = None

    def read(self) -> bytes:
        if self.remote is not None:
            return bytes(self.remote)
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


def read_chunks(
    states: list[FetchState],
    max_bytes: int,
    chunk_bytes: int,
    remote: RemoteFetches | None = None,
) -> Iterator[FetchChunk]:
    """The answer's chunks. With `remote`, a consumer's read below the local log start is
    read from the object store (one remote segment per chunk), and every consumer chunk
    carries the remote log start (the earliest offset it may fetch)."""
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
        cold = remote if state.replica_id == CONSUMER and tiered(log) else None
        while True:
            limit = min(chunk_bytes, partition_budget, budget)
            local_start = log.log_start_offset
            if cold is not None and offset < local_start:
                try:
                    reads = cold.read(
                        state.topic,
                        state.partition,
                        offset,
                        max(min(partition_budget, budget), 0),
                        local_start=local_start,
                        max_offset=state.max_offset(),
                        min_one_message=not sent_data,
                        read_committed=state.read_committed,
                        piece_bytes=chunk_bytes,
                    )
                except SeglogError as exc:
                    if chunks == 0:
                        logger.info(
                            "%s-%d: remote fetch at %d refused: %s",
                            state.topic,
                            state.partition,
                            offset,
                            exc,
                        )
                        yield _error_chunk(state, exc, remote)
                    break
                size = 0
                pieces: list[RemoteRead | None] = list(reads) if reads else [None]
                for read in pieces:
                    piece = 0 if read is None else len(read.data)
                    if piece or chunks == 0:
                        remote_aborted: tuple[AbortedTxn, ...] = ()
                        if read is not None and state.read_committed and piece:
                            remote_aborted = read.aborted
                            if not read.aborted_complete:  # markers past the copied segments
                                local = log.aborted_transactions(offset, read.next_offset)
                                remote_aborted += tuple(t for t in local if t not in read.aborted)
                        yield FetchChunk(
                            state.topic,
                            state.partition,
                            log.high_watermark,
                            cold.log_start_offset(state.topic, state.partition, local_start),
                            remote=None if read is None else read.data,
                            last_stable_offset=log.last_stable_offset,
                            aborted=remote_aborted,
                        )
                        chunks += 1
                    if read is not None and piece:
                        offset = read.next_offset
                        size += piece
                if reads is None or not size:
                    break  # timed out (answers no records, as Kafka), or nothing below the bound
                sent_data = True
                partition_budget -= size
                budget -= size
                if partition_budget <= 0 or budget <= 0 or offset >= log.high_watermark:
                    break
                continue
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
                    yield _error_chunk(state, exc, cold)
                    chunks += 1
                break
            if found.size or chunks == 0:
                aborted: tuple[AbortedTxn, ...] = ()
                if state.read_committed and found.size:  # Kafka's addAbortedTransactions
                    aborted = tuple(log.aborted_transactions(offset, found.next_offset))
                start = found.log_start_offset
                if cold is not None:
                    start = cold.log_start_offset(state.topic, state.partition, start)
                yield FetchChunk(
                    state.topic,
                    state.partition,
                    log.high_watermark,
                    start,
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


def _error_chunk(
    state: FetchState, error: SeglogError, remote: RemoteFetches | None = None
) -> FetchChunk:
    hw = start = stable = -1
    if state.log is not None:
        hw, start = state.log.high_watermark, state.log.log_start_offset
        stable = state.log.last_stable_offset
        if remote is not None and state.replica_id == CONSUMER and tiered(state.log):
            start = remote.log_start_offset(state.topic, state.partition, start)
    return FetchChunk(
        state.topic, state.partition, hw, start, None, error, last_stable_offset=stable
    )


def tiered(log: Log) -> bool:
    """Whether the topic's data may lie in the object store (remote.storage.enable)."""
    return bool(getattr(log.config, "remote_storage_enable", False))


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
