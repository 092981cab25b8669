"""A leader's reads below its local log start, from the object store (KIP-405's remote
fetch): consumers' fetches and ListOffsets answered from the copied segments, on a pool of
its own so that a slow or stopped store never holds what reads local data.

Kafka's shape, with Kafka's settings:
- `remote.log.reader.threads` (10) threads read remote segments; at most
  `remote.log.reader.max.pending.tasks` (100) reads wait for one. A read that finds the
  queue full answers KAFKA_STORAGE_ERROR at once (retriable): the fetch's other partitions
  and every other fetch go on.
- A fetch waits for its remote read at most `remote.fetch.max.wait.ms` (500 ms); past it the
  partition answers no records and no error, as Kafka's DelayedRemoteFetch on expiry, and the
  consumer asks again. The read goes on in its thread and warms the index cache.
- Every object store call runs on those threads, never on the fetch path: the remote log
  start a consumer's answer carries is the last one a reader thread learnt from the
  metadata (refreshed in the background when older than the metadata's cache period), and
  the local log start until one is known.
- Remote indexes: remote_indexes.py's cache, bounded by
  `remote.log.index.file.cache.total.size.bytes` (1 GiB).
- A fetch's remote part is read in one job, as pieces of the fetch chunk size: one trip to
  a reader thread per fetch and segment (a trip per 1 MiB piece cost more than the GETs on
  a loaded machine).
- A consumer reading forward: after each remote read, the next READ_AHEAD_CHUNKS 8 MiB
  chunks (into the next copied segment at this one's end) are fetched ahead, each on an
  idle reader thread (never ahead of a waiting read), so its next fetches find them in
  memory (remote_chunks.RemoteChunks, 128 MiB at most).
- A read goes to the metadata only for an offset outside the partition's segments as last
  read: copied segments never change.
The bulk path cannot sendfile these bytes (they are in memory, not in a file): a remote chunk
goes out of the bulk answer as a copy (bulk_answer.py), the rest of the answer unchanged."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TypeVar

from seglog.errors import InvalidConfigError, OffsetOutOfRangeError, SeglogError
from seglog.storage.remote_indexes import DEFAULT_INDEX_CACHE_BYTES, RemoteIndexCache
from seglog.storage.remote_metadata import RemoteLogMetadata, RemoteSegment
from seglog.storage.remote_reads import RemoteLogReader, RemoteRead
from seglog.storage.remote_store import (
    RemoteObjectNotFoundError,
    RemoteStorageError,
    RemoteStore,
)
from seglog.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Chunks (remote_chunks.CHUNK_BYTES, 8 MiB: SeaweedFS's and the node's CPU per byte fell by
# 40% from 4 MiB GETs) a consumer reading forward has fetched ahead: two 8 MiB fetches.
READ_AHEAD_CHUNKS = 2


@dataclass(frozen=True)
class RemoteReadSettings:
    """Kafka's remote read settings (RemoteLogManagerConfig), with Kafka's defaults."""

    remote_log_reader_threads: int = 10
    remote_log_reader_max_pending_tasks: int = 100
    remote_fetch_max_wait_ms: int = 500
    remote_log_index_file_cache_total_size_bytes: int = DEFAULT_INDEX_CACHE_BYTES

    def __post_init__(self) -> None:
        for name, least in (
            ("remote_log_reader_threads", 1),
            ("remote_log_reader_max_pending_tasks", 0),
            ("remote_fetch_max_wait_ms", 1),
            ("remote_log_index_file_cache_total_size_bytes", 1),
        ):
            if getattr(self, name) < least:
                raise InvalidConfigError(f"{name.replace('_', '.')} must be at least {least}")


class RemoteFetches:
    """Reads from the object store for one node. `topic_id(topic, partition)` names a
    partition's topic id ("" unknown: nothing is read remotely for it)."""

    def __init__(
        self,
        store: RemoteStore,
        metadata: RemoteLogMetadata,
        topic_id: Callable[[str, int], str],
        settings: RemoteReadSettings | None = None,
    ) -> None:
        self.settings = settings or RemoteReadSettings()
        self.metadata = metadata
        self.reader = RemoteLogReader(
            store, RemoteIndexCache(self.settings.remote_log_index_file_cache_total_size_bytes)
        )
        self.topic_id = topic_id
        self._executor = ThreadPoolExecutor(
            self.settings.remote_log_reader_threads, thread_name_prefix="remote-log-reader"
        )
        self._slots = threading.BoundedSemaphore(
            self.settings.remote_log_reader_threads
            + self.settings.remote_log_reader_max_pending_tasks
        )
        self._lock = threading.Lock()
        # What was learnt of each partition's remote data, with the topic id it was learnt for
        # (a topic deleted and made again under its name is another topic):
        # (topic, partition) -> (topic id, remote log start or None, learnt at monotonic s)
        self._starts: dict[tuple[str, int], tuple[str, int | None, float]] = {}
        self._refreshing: set[tuple[str, int]] = set()
        self._in_flight = 0  # jobs submitted and not done
        # Each partition's copied segments as last read from the metadata: a copied segment
        # never changes, so a read inside one needs no metadata (a refresh is a LIST and a
        # GET per segment, tens of ms); one outside them all reads the metadata.
        self._known: dict[tuple[str, int], tuple[str, list[RemoteSegment]]] = {}

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- the pool -------------------------------------------------------------------------

    def _submit(self, job: Callable[[], T]) -> Future[T]:
        if not self._slots.acquire(blocking=False):
            raise RemoteStorageError(
                "remote reads are all busy ("
                f"{self.settings.remote_log_reader_threads} threads, "
                f"{self.settings.remote_log_reader_max_pending_tasks} waiting): try again"
            )
        with self._lock:
            self._in_flight += 1  # before the job can end
        try:
            future = self._executor.submit(job)
        except RuntimeError as exc:  # shut down: the node is stopping
            self._done(None)
            raise RemoteStorageError(f"remote reads stopped: {exc}") from None
        future.add_done_callback(self._done)
        return future

    def _done(self, _: object) -> None:
        with self._lock:
            self._in_flight -= 1
        self._slots.release()

    def _wait(self, future: Future[T], what: str) -> T | None:
        """The job's answer; None when it took longer than remote.fetch.max.wait.ms."""
        try:
            return future.result(self.settings.remote_fetch_max_wait_ms / 1000)
        except FutureTimeout:
            logger.info("%s: not answered in %d ms", what, self.settings.remote_fetch_max_wait_ms)
            return None
        except SeglogError:
            raise
        except Exception as exc:  # a bug or an unexpected client failure: still retriable
            raise RemoteStorageError(f"{what} failed: {exc!r}") from None

    # -- the remote log start ---------------------------------------------------------------

    def log_start_offset(self, topic: str, partition: int, local_start: int) -> int:
        """The log start a consumer sees: the remote one when remote data is known to lie
        below the local start, else the local one. Never waits for the store: a stale or
        unknown value is refreshed by a reader thread for the next answer."""
        known = self._start_known(topic, partition)
        if known is None or time.monotonic() - known[1] > self.metadata.cache_ms / 1000:
            self._refresh_start(topic, partition)
        if known is None or known[0] is None:
            return local_start
        return min(known[0], local_start)

    def _start_known(self, topic: str, partition: int) -> tuple[int | None, float] | None:
        """(remote log start, when learnt) for the partition's current topic id, if learnt."""
        topic_id = self.topic_id(topic, partition)
        with self._lock:
            known = self._starts.get((topic, partition))
        if known is None or known[0] != topic_id:
            return None
        return known[1], known[2]

    def _segments_known(self, topic: str, partition: int) -> list[RemoteSegment]:
        topic_id = self.topic_id(topic, partition)
        with self._lock:
            known = self._known.get((topic, partition))
        return known[1] if known is not None and known[0] == topic_id else []

    def _refresh_start(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        with self._lock:
            if tp in self._refreshing:
                return
            self._refreshing.add(tp)

        def refresh() -> None:
            try:
                self._learn_start(topic, partition)
            finally:
                with self._lock:
                    self._refreshing.discard(tp)

        try:
            self._submit(refresh)
        except SeglogError:
            with self._lock:
                self._refreshing.discard(tp)

    def _learn_start(self, topic: str, partition: int) -> None:
        topic_id = self.topic_id(topic, partition)
        segments = self.metadata.segments(topic_id, partition) if topic_id else []
        self._remember(topic, partition, topic_id, segments)

    def forget(self, topic: str, partition: int) -> None:
        with self._lock:
            self._starts.pop((topic, partition), None)
            self._known.pop((topic, partition), None)

    # -- reads -----------------------------------------------------------------------------

    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        *,
        local_start: int,
        max_offset: int | None,
        min_one_message: bool,
        read_committed: bool = False,
        piece_bytes: int | None = None,
    ) -> list[RemoteRead] | None:
        """Whole batches from the remote segment holding `offset` (below `local_start`), at
        most to the local start and `max_bytes` in all, as consecutive pieces of at most
        `piece_bytes` each (a single larger batch alone), read in one job: one trip to a
        reader thread per fetch and segment, not per piece. None when the store did not
        answer in time. Raises OffsetOutOfRangeError below the remote log start,
        RemoteStorageError when the store fails or the pool is full."""
        bound = local_start if max_offset is None else min(max_offset, local_start)
        piece = max_bytes if piece_bytes is None else min(piece_bytes, max_bytes)

        def job() -> list[RemoteRead]:
            tp = (topic, partition)
            learnt = self._start_known(topic, partition)
            if learnt is not None and learnt[0] is not None and offset < learnt[0]:
                raise OffsetOutOfRangeError(  # DeleteRecords or retention moved the start
                    f"offset {offset} of {topic}-{partition} is below the log start offset "
                    f"{learnt[0]}"
                )
            known = self._segments_known(topic, partition)
            segment = next((s for s in known if s.base_offset <= offset <= s.end_offset), None)
            if segment is None:
                segment = self._segment_for(topic, partition, offset, local_start)
            pieces: list[RemoteRead] = []
            at, left = offset, max_bytes
            try:
                while left > 0 and at <= segment.end_offset and at < bound:
                    found = self.reader.read(
                        topic,
                        segment,
                        at,
                        min(piece, left),
                        max_offset=bound,
                        min_one_message=min_one_message and not pieces,
                    )
                    if not found.data:
                        break
                    if read_committed:
                        known = self._segments_known(topic, partition) or [segment]
                        found = self._with_aborted(topic, known, segment, at, found)
                    pieces.append(found)
                    at, left = found.next_offset, left - len(found.data)
                if pieces:
                    self._read_ahead(topic, partition, segment, pieces[-1], local_start)
            except RemoteObjectNotFoundError:
                # Remote retention deleted it since: the metadata says what is left.
                with self._lock:
                    self._known.pop(tp, None)
                self.reader.indexes.remove(segment.segment_id)
                self.reader.chunks.forget(segment.segment_id)
                raise
            return pieces or [RemoteRead(b"", offset)]

        return self._wait(self._submit(job), f"{topic}-{partition}: remote read at {offset}")

    def _with_aborted(
        self,
        topic: str,
        known: list[RemoteSegment],
        segment: RemoteSegment,
        offset: int,
        found: RemoteRead,
    ) -> RemoteRead:
        """Kafka's collectAbortedTransactions over remote segments: from the segment read
        on, each copied `.txnindex`, until one shows no later marker concerns the range."""
        aborted: list[AbortedTxn] = []
        later = [s for s in known if s.base_offset > segment.base_offset]
        for each in [segment, *sorted(later, key=lambda s: s.base_offset)]:
            search = self.reader.segment_indexes(topic, each).aborted_transactions(
                offset, found.next_offset
            )
            aborted.extend(search.aborted)
            if search.complete:
                return replace(found, aborted=tuple(aborted), aborted_complete=True)
        return replace(found, aborted=tuple(aborted), aborted_complete=False)

    def _read_ahead(
        self,
        topic: str,
        partition: int,
        segment: RemoteSegment,
        found: RemoteRead,
        local_start: int,
    ) -> None:
        """A consumer reading forward asks for the next bytes next: fetch the chunks after
        these (READ_AHEAD_CHUNKS of them, into the next copied segment when this one ends)
        now, while it handles these, each on a reader thread that is idle (never ahead of a
        read that waits), within the chunk cache's room for chunks not read yet."""
        with self._lock:
            idle = self.settings.remote_log_reader_threads - self._in_flight
        if idle <= 0 or not found.data or found.next_offset >= local_start:
            return
        chunks = self.reader.chunks
        ahead = chunks.chunk_count(self.reader.object_of(topic, segment))
        ahead -= found.next_position // chunks.chunk_bytes  # this segment's chunks from here
        wanted = [
            (segment, i)
            for i in self.reader.fetch_ahead(
                topic, segment, found.next_position, min(ahead, READ_AHEAD_CHUNKS), idle
            )
        ]
        following = self._following(topic, partition, segment, local_start)
        if ahead < READ_AHEAD_CHUNKS and following is not None and len(wanted) < idle:
            claimed = self.reader.fetch_ahead(
                topic, following, 0, READ_AHEAD_CHUNKS - ahead, idle - len(wanted)
            )
            wanted += [(following, i) for i in claimed]
        for each, index in wanted:
            try:
                self._submit(functools.partial(self._fill, topic, each, index))
            except SeglogError:
                self.reader.abandon(topic, each, index)

    def _fill(self, topic: str, segment: RemoteSegment, index: int) -> None:
        try:
            self.reader.fill(topic, segment, index)
        except SeglogError as exc:  # the read that wants it asks the store itself
            logger.info(
                "%s: fetching ahead chunk %d of %s: %s", topic, index, segment.segment_id, exc
            )

    def _following(
        self, topic: str, partition: int, segment: RemoteSegment, local_start: int
    ) -> RemoteSegment | None:
        """The copied segment after `segment`, as last read from the metadata."""
        after = segment.end_offset + 1
        if after >= local_start:
            return None
        return next(
            (s for s in self._segments_known(topic, partition) if s.base_offset == after), None
        )

    def offset_for_timestamp(
        self, topic: str, partition: int, timestamp_ms: int, local_start: int
    ) -> tuple[int, int] | None:
        """ListOffsets for a timestamp over the remote segments below `local_start`:
        (offset, timestamp) of the first record whose timestamp >= `timestamp_ms`, None when
        none is remote (the local log answers). Waits for the store as long as a read may
        (remote.fetch.max.wait.ms), then answers a retriable error."""

        def job() -> tuple[int, int] | None:
            topic_id = self.topic_id(topic, partition)
            if not topic_id:
                return None
            segments = self.metadata.segments(topic_id, partition)
            self._remember(topic, partition, topic_id, segments)
            for segment in segments:
                if segment.base_offset >= local_start or segment.max_timestamp_ms < timestamp_ms:
                    continue
                found = self.reader.offset_for_timestamp(
                    topic, segment, timestamp_ms, segment.base_offset
                )
                if found is not None and found[0] < local_start:
                    return found
            return None

        what = f"{topic}-{partition}: remote timestamp lookup"
        future = self._submit(job)
        try:
            return future.result(self.settings.remote_fetch_max_wait_ms / 1000)
        except FutureTimeout:
            raise RemoteStorageError(f"{what}: the object store did not answer in time") from None

    def earliest_offset(self, topic: str, partition: int, local_start: int) -> int:
        """ListOffsets EARLIEST: the remote log start as last learnt (refreshed in the
        background when stale, so a store that is down does not fail it), asked of the
        metadata, waiting as offset_for_timestamp does, only when none was learnt yet."""
        known = self._start_known(topic, partition)
        if known is None:
            start = self._remote_start(topic, partition)
        else:
            start = known[0]
            if time.monotonic() - known[1] > self.metadata.cache_ms / 1000:
                self._refresh_start(topic, partition)
        return local_start if start is None else min(start, local_start)

    def _remote_start(self, topic: str, partition: int) -> int | None:
        def job() -> int | None:
            topic_id = self.topic_id(topic, partition)
            if not topic_id:
                return None
            segments = self.metadata.segments(topic_id, partition)
            self._remember(topic, partition, topic_id, segments)
            return self.metadata.log_start_offset(topic_id, partition) if segments else None

        future = self._submit(job)
        try:
            return future.result(self.settings.remote_fetch_max_wait_ms / 1000)
        except FutureTimeout:
            raise RemoteStorageError(
                f"{topic}-{partition}: the object store did not answer in time"
            ) from None

    def _remember(
        self, topic: str, partition: int, topic_id: str, segments: list[RemoteSegment]
    ) -> None:
        # The first segment's base, or past it the log start DeleteRecords set.
        start = self.metadata.log_start_offset(topic_id, partition) if segments else None
        with self._lock:
            self._starts[(topic, partition)] = (topic_id, start, time.monotonic())
            self._known[(topic, partition)] = (topic_id, segments)

    def _segment_for(
        self, topic: str, partition: int, offset: int, local_start: int
    ) -> RemoteSegment:
        topic_id = self.topic_id(topic, partition)
        segments: list[RemoteSegment] = []
        for attempt in range(2 if topic_id else 0):
            if attempt:  # the cached view may predate the copy: read the metadata again once
                self.metadata.invalidate(topic_id, partition)
            segments = self.metadata.segments(topic_id, partition)
            self._remember(topic, partition, topic_id, segments)
            start = self.metadata.log_start_offset(topic_id, partition)
            if segments and start is not None and start <= offset:
                for segment in segments:
                    if segment.end_offset >= offset:
                        return segment
        start = self.metadata.log_start_offset(topic_id, partition) if segments else None
        start = local_start if start is None else start
        raise OffsetOutOfRangeError(
            f"offset {offset} of {topic}-{partition} is below the log start offset {start}"
        )
