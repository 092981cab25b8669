"""The storage node's domain object (Kafka's ReplicaManager): the partitions it hosts, each
with its log and leader epoch, appends, and fetches that wait for data. The gRPC servicer
(service.py) only translates calls to and from it, and the registry session reconciles
through it; replication state (roles, ISR, watermarks) joins the partitions here.

Append: the whole request is checked (every partition hosted and at the caller's leader
epoch, every batch validated by the engine) before any partition is appended; a failure there
fails the call and writes nothing.

Fetch: a long poll. `wait_for_fetch` returns as soon as `min_bytes` are available across the
requested partitions (counted from file positions, never by reading) or `max_wait_ms` passes;
appends wake waiting fetches through one condition variable (no polling). `read_chunks` then
yields whole batches as stored, at most `chunk_bytes` per chunk (a single larger batch
travels alone), each chunk saying which segment and file position its bytes come from; every
requested partition gets at least one chunk carrying its watermarks, and its error if any.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from seglog.errors import InvalidRequestError, NotLeaderError, SeglogError
from seglog.storage import Log, log_files
from seglog.storage.log import LogAppendInfo, LogSlice, TimestampAndOffset
from seglog.storage.log_manager import LogManager
from seglog.storage.log_reads import ReadPosition
from seglog.storage.validation import ValidatedRecords

DEFAULT_CHUNK_BYTES = 1024 * 1024
NO_EPOCH = -1
TopicPartition = tuple[str, int]


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

    def read(self) -> bytes:
        return b"" if self.found is None else self.found.read()


@dataclass(frozen=True)
class AppendResult:
    partition: int
    info: LogAppendInfo | None
    error: SeglogError | None = None


@dataclass(frozen=True)
class PartitionDescription:
    topic: str
    partition: int
    leader_epoch: int
    log_start_offset: int = -1
    log_end_offset: int = -1
    size_bytes: int = 0
    segment_count: int = 0
    error: SeglogError | None = None


class ReplicaManager:
    def __init__(self, logs: LogManager, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.logs = logs
        self.chunk_bytes = chunk_bytes
        self._epochs: dict[TopicPartition, int] = {}
        self._appended = threading.Condition()
        self._append_seq = 0
        self._stopping = False

    # -- partitions ----------------------------------------------------------------------

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._epochs.get((topic, partition), NO_EPOCH)

    def hosted(self) -> list[TopicPartition]:
        return sorted(self.logs.logs())

    def offline(self) -> dict[TopicPartition, str]:
        return self.logs.offline()

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The topic's overrides as the registry last gave them."""
        return {k: str(v) for k, v in self.logs.topic_overrides(topic).items()}

    def create_partition(
        self, topic: str, partition: int, leader_epoch: int, configs: Mapping[str, str]
    ) -> Log:
        # The same checks the gateway makes: the node's API is reachable by any caller.
        log_files.check_topic_name(topic)
        if dict(configs) != self.topic_configs(topic):
            self.logs.set_topic_overrides(topic, dict(configs))
        log = self.logs.create_log(topic, partition)
        self._epochs[(topic, partition)] = leader_epoch
        return log

    def delete_partition(self, topic: str, partition: int) -> None:
        log_files.check_topic_name(topic)
        self.logs.delete_log(topic, partition)
        self._epochs.pop((topic, partition), None)
        self.wake_fetchers()

    def set_aside_partition(self, topic: str, partition: int) -> Path:
        path = self.logs.set_aside_log(topic, partition)
        self._epochs.pop((topic, partition), None)
        return path

    def mark_offline(self, topic: str, partition: int, reason: str) -> None:
        self.logs.mark_offline(topic, partition, reason)

    def forget_offline(self, topic: str, partition: int) -> None:
        self.logs.forget_offline(topic, partition)

    def check_epoch(self, topic: str, partition: int, client_epoch: int) -> None:
        known = self._epochs.get((topic, partition), NO_EPOCH)
        if client_epoch >= 0 and known >= 0 and client_epoch != known:
            raise NotLeaderError(
                f"{topic}-{partition}: request carries leader epoch {client_epoch}, this node "
                f"leads epoch {known}; refresh metadata"
            )

    # -- append --------------------------------------------------------------------------

    def append(self, topic: str, entries: Sequence[tuple[int, bytes, int]]) -> list[AppendResult]:
        """Append (partition, records, client leader epoch) entries, all checked first: an
        error raised here wrote nothing; a partition's own append failure is its result's."""
        checked: list[tuple[int, Log, ValidatedRecords]] = []
        for partition, records, client_epoch in entries:
            log = self.logs.get_log(topic, partition)
            self.check_epoch(topic, partition, client_epoch)
            try:
                checked.append((partition, log, log.validate(records)))
            except SeglogError as exc:
                raise type(exc)(f"{topic}-{partition}: {exc}") from None
        results = []
        for partition, log, validated in checked:
            try:
                info = log.append(validated, leader_epoch=self._leader_epoch_or_none(log))
                results.append(AppendResult(partition, info))
            except SeglogError as exc:
                results.append(AppendResult(partition, None, exc))
        self.wake_fetchers()
        return results

    def _leader_epoch_or_none(self, log: Log) -> int | None:
        epoch = self._epochs.get((log.topic, log.partition), NO_EPOCH)
        return epoch if epoch >= 0 else None

    def wake_fetchers(self) -> None:
        with self._appended:
            self._append_seq += 1
            self._appended.notify_all()

    def stop(self) -> None:
        """Wake every waiting fetch so it answers with what it has."""
        self._stopping = True
        self.wake_fetchers()

    # -- fetch ---------------------------------------------------------------------------

    def fetch_states(self, wanted: Sequence[tuple[str, int, int, int, int]]) -> list[FetchState]:
        """(topic, partition, fetch offset, partition max bytes, client leader epoch) each."""
        states = []
        for topic, partition, offset, max_bytes, client_epoch in wanted:
            state = FetchState(topic, partition, offset, max_bytes, None)
            try:
                state.log = self.logs.get_log(topic, partition)
                self.check_epoch(topic, partition, client_epoch)
                if max_bytes <= 0:
                    raise InvalidRequestError(
                        f"{topic}-{partition}: partition_max_bytes must be > 0"
                    )
            except SeglogError as exc:
                state.error = exc
            states.append(state)
        return states

    def wait_for_fetch(
        self,
        states: list[FetchState],
        min_bytes: int,
        max_wait_ms: int,
        is_active: Callable[[], bool],
    ) -> None:
        """Kafka's delayed fetch: return once `min_bytes` are available, the wait is over,
        the caller went away, or the node is stopping."""
        deadline = time.monotonic() + max_wait_ms / 1000
        while is_active() and not self._stopping:
            seq = self._append_seq
            if self._available_bytes(states, min_bytes) >= min_bytes:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with self._appended:
                if self._append_seq == seq:
                    self._appended.wait(remaining)

    def _available_bytes(self, states: list[FetchState], enough: int) -> int:
        """Bytes ready to send, counted from file positions until `enough` (errors count:
        they answer at once)."""
        total = 0
        for state in states:
            if state.error is not None:
                return enough
            log = state.log
            assert log is not None
            if state.offset == log.log_end_offset:
                continue
            if enough <= 1 or not log.log_start_offset <= state.offset <= log.log_end_offset:
                return enough  # data, or an out-of-range error to answer now
            state.position = log.bytes_from(state.offset, state.position)
            total += max(state.position.available_bytes, 1)
            if total >= enough:
                return total
        return total

    def read_chunks(self, states: list[FetchState], max_bytes: int) -> Iterator[FetchChunk]:
        budget = max_bytes
        sent_data = False
        for state in states:
            if state.error is not None:
                yield self._error_chunk(state, state.error)
                continue
            log = state.log
            assert log is not None
            offset = state.offset
            partition_budget = state.max_bytes
            chunks = 0
            while True:
                limit = min(self.chunk_bytes, partition_budget, budget)
                try:
                    found = log.locate_records(offset, max(limit, 0), min_one_message=not sent_data)
                except SeglogError as exc:
                    if chunks == 0:
                        yield self._error_chunk(state, exc)
                        chunks += 1
                    break
                if found.size or chunks == 0:
                    yield FetchChunk(
                        state.topic,
                        state.partition,
                        found.high_watermark,
                        found.log_start_offset,
                        found,
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

    @staticmethod
    def _error_chunk(state: FetchState, error: SeglogError) -> FetchChunk:
        hw = lso = -1
        if state.log is not None:
            hw, lso = state.log.log_end_offset, state.log.log_start_offset
        return FetchChunk(state.topic, state.partition, hw, lso, None, error)

    # -- offsets and descriptions --------------------------------------------------------

    def list_offset(
        self, topic: str, partition: int, timestamp_ms: int, client_epoch: int
    ) -> TimestampAndOffset | None:
        log = self.logs.get_log(topic, partition)
        self.check_epoch(topic, partition, client_epoch)
        return log.offset_for_timestamp(timestamp_ms)

    def describe(self, topic: str, partition: int) -> PartitionDescription:
        epoch = self.leader_epoch(topic, partition)
        try:
            log = self.logs.get_log(topic, partition)
        except SeglogError as exc:
            return PartitionDescription(topic, partition, epoch, error=exc)
        return PartitionDescription(
            topic,
            partition,
            epoch,
            log.log_start_offset,
            log.log_end_offset,
            log.size_in_bytes,
            len(log.segments),
        )
