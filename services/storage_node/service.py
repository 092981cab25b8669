"""The StorageNode gRPC service over one LogManager.

Append: the whole request is checked (acks, duplicate partitions, every partition hosted and
at the caller's leader epoch, every batch validated by the engine) before any partition is
appended; a failure there fails the call with its status and writes nothing.

Fetch: a long poll. The node answers as soon as `min_bytes` are available across the
requested partitions or `max_wait_ms` passes; appends wake waiting fetches through one
condition variable (no polling). The answer streams whole batches as stored, in messages of
at most `chunk_bytes` (a single larger batch travels alone), written as wire bytes directly
(seglog.rpc.wire). Every requested partition gets at least one message carrying its
watermarks, and its error if it has one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import grpc

from seglog.errors import (
    InvalidRequestError,
    NotLeaderError,
    SeglogError,
)
from seglog.rpc import check_fetch_request, check_produce_request, client_leader_epoch, wire
from seglog.rpc.status import abort, error_code_for, set_error
from seglog.storage import Log, log_files
from seglog.storage.log_manager import LogManager
from seglog.storage.log_reads import ReadPosition
from seglog.storage.validation import ValidatedRecords
from seglog.v1 import common_pb2, storage_pb2
from services.wait_slots import DEFAULT_MAX_WAITING_CALLS, WaitSlots

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 1024 * 1024
NO_EPOCH = -1


@dataclass
class _FetchState:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    log: Log | None
    error: SeglogError | None = None
    position: ReadPosition | None = None  # where `offset` was found, reused while waiting


class StorageNodeService:
    def __init__(
        self,
        logs: LogManager,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        max_waiting_fetches: int = DEFAULT_MAX_WAITING_CALLS,
    ) -> None:
        self.logs = logs
        self.chunk_bytes = chunk_bytes
        self.waiting_fetches = WaitSlots(max_waiting_fetches)
        self._epochs: dict[tuple[str, int], int] = {}
        self._appended = threading.Condition()
        self._append_seq = 0
        self._stopping = False

    # -- partitions ----------------------------------------------------------------------

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._epochs.get((topic, partition), NO_EPOCH)

    def create_partition(
        self, topic: str, partition: int, leader_epoch: int, configs: Mapping[str, str]
    ) -> Log:
        # The same checks the gateway makes: this API is reachable by any caller.
        log_files.check_topic_name(topic)
        if configs:
            self.logs.set_topic_overrides(topic, dict(configs))
        log = self.logs.create_log(topic, partition)
        self._epochs[(topic, partition)] = leader_epoch
        return log

    def delete_partition(self, topic: str, partition: int) -> None:
        log_files.check_topic_name(topic)
        self.logs.delete_log(topic, partition)
        self._epochs.pop((topic, partition), None)
        self._wake_fetchers()

    def _check_epoch(self, topic: str, partition: int, client_epoch: int) -> None:
        known = self._epochs.get((topic, partition), NO_EPOCH)
        if client_epoch >= 0 and known >= 0 and client_epoch != known:
            raise NotLeaderError(
                f"{topic}-{partition}: request carries leader epoch {client_epoch}, this node "
                f"leads epoch {known}; refresh metadata"
            )

    # -- Append --------------------------------------------------------------------------

    def Append(
        self, request: common_pb2.ProduceRequest, context: grpc.ServicerContext
    ) -> common_pb2.ProduceResponse:
        try:
            checked = self._check_append(request)
        except SeglogError as exc:
            abort(context, exc)
        response = common_pb2.ProduceResponse(topic=request.topic)
        for partition, log, validated in checked:
            result = response.partitions.add(partition=partition)
            try:
                info = log.append(validated, leader_epoch=self._leader_epoch_or_none(log))
            except SeglogError as exc:
                set_error(result, exc)
                result.base_offset = result.last_offset = -1
                continue
            result.base_offset = info.first_offset
            result.last_offset = info.last_offset
            result.log_append_time_ms = info.log_append_time_ms
            result.log_start_offset = info.log_start_offset
        self._wake_fetchers()
        return response

    def _check_append(
        self, request: common_pb2.ProduceRequest
    ) -> list[tuple[int, Log, ValidatedRecords]]:
        check_produce_request(request)
        checked = []
        for data in request.partitions:
            log = self.logs.get_log(request.topic, data.partition)
            self._check_epoch(request.topic, data.partition, client_leader_epoch(data))
            try:
                validated = log.validate(data.records)
            except SeglogError as exc:
                raise type(exc)(f"{request.topic}-{data.partition}: {exc}") from None
            checked.append((data.partition, log, validated))
        return checked

    def _leader_epoch_or_none(self, log: Log) -> int | None:
        epoch = self._epochs.get((log.topic, log.partition), NO_EPOCH)
        return epoch if epoch >= 0 else None

    def _wake_fetchers(self) -> None:
        with self._appended:
            self._append_seq += 1
            self._appended.notify_all()

    def stop(self) -> None:
        """Wake every waiting fetch so it answers with what it has."""
        self._stopping = True
        self._wake_fetchers()

    # -- Fetch ---------------------------------------------------------------------------

    def Fetch(
        self, request: common_pb2.FetchRequest, context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        try:
            check_fetch_request(request)
        except SeglogError as exc:
            abort(context, exc)
        states = self._fetch_states(request)
        min_bytes = max(request.min_bytes, 0)
        # A long poll holds a server thread: only `waiting_fetches.limit` may wait at once,
        # and the rest answer with what they have now, as if max_wait_ms had passed.
        if request.max_wait_ms > 0 and self.waiting_fetches.try_acquire():
            waiting = [True]

            def woken_if_cancelled() -> None:
                # Runs when the call ends; only a call that ends while it waits (cancelled)
                # needs the waiters woken, not every fetch that completes.
                if waiting[0]:
                    self._wake_fetchers()

            try:
                context.add_callback(woken_if_cancelled)
                self._wait_for_bytes(states, min_bytes, request.max_wait_ms, context)
            finally:
                waiting[0] = False
                self.waiting_fetches.release()
        if not context.is_active():
            return
        yield from self._stream(states, request.max_bytes or (1 << 31) - 1)

    def _wait_for_bytes(
        self,
        states: list[_FetchState],
        min_bytes: int,
        max_wait_ms: int,
        context: grpc.ServicerContext,
    ) -> None:
        deadline = time.monotonic() + max_wait_ms / 1000
        while context.is_active() and not self._stopping:
            seq = self._append_seq
            if self._available_bytes(states, min_bytes) >= min_bytes:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with self._appended:
                if self._append_seq == seq:
                    self._appended.wait(remaining)

    def _fetch_states(self, request: common_pb2.FetchRequest) -> list[_FetchState]:
        states = []
        for p in request.partitions:
            state = _FetchState(p.topic, p.partition, p.fetch_offset, p.partition_max_bytes, None)
            try:
                state.log = self.logs.get_log(p.topic, p.partition)
                self._check_epoch(p.topic, p.partition, client_leader_epoch(p))
                if p.partition_max_bytes <= 0:
                    raise InvalidRequestError(
                        f"{p.topic}-{p.partition}: partition_max_bytes must be > 0"
                    )
            except SeglogError as exc:
                state.error = exc
            states.append(state)
        return states

    def _available_bytes(self, states: list[_FetchState], enough: int) -> int:
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

    def _stream(self, states: list[_FetchState], max_bytes: int) -> Iterator[bytes]:
        budget = max_bytes
        sent_data = False
        for state in states:
            if state.error is not None:
                yield self._error_message(state, state.error)
                continue
            assert state.log is not None
            log = state.log
            offset = state.offset
            partition_budget = state.max_bytes
            messages = 0
            while True:
                limit = min(self.chunk_bytes, partition_budget, budget)
                try:
                    read = log.read_records(offset, max(limit, 0), min_one_message=not sent_data)
                except SeglogError as exc:
                    if messages == 0:
                        yield self._error_message(state, exc)
                        messages += 1
                    break
                if read.data or messages == 0:
                    yield wire.encode_fetch_response(
                        state.topic,
                        state.partition,
                        read.high_watermark,
                        read.log_start_offset,
                        read.data,
                    )
                    messages += 1
                if not read.data:
                    break
                sent_data = True
                offset = read.next_offset
                partition_budget -= len(read.data)
                budget -= len(read.data)
                if partition_budget <= 0 or budget <= 0 or offset >= read.high_watermark:
                    break

    def _error_message(self, state: _FetchState, error: SeglogError) -> bytes:
        hw = lso = -1
        if state.log is not None:
            hw, lso = state.log.log_end_offset, state.log.log_start_offset
        return wire.encode_fetch_response(
            state.topic, state.partition, hw, lso, b"", error_code_for(error), str(error)
        )

    # -- ListOffsets, CreatePartition, DeletePartition, DescribePartitions -----------------

    def ListOffsets(
        self, request: common_pb2.ListOffsetsRequest, context: grpc.ServicerContext
    ) -> common_pb2.ListOffsetsResponse:
        response = common_pb2.ListOffsetsResponse()
        for p in request.partitions:
            result = response.partitions.add(topic=p.topic, partition=p.partition)
            try:
                log = self.logs.get_log(p.topic, p.partition)
                self._check_epoch(p.topic, p.partition, client_leader_epoch(p))
                found = log.offset_for_timestamp(p.timestamp)
            except SeglogError as exc:
                set_error(result, exc)
                result.offset = result.timestamp = -1
                continue
            result.offset = -1 if found is None else found.offset
            result.timestamp = -1 if found is None else found.timestamp_ms
            result.leader_epoch = self.leader_epoch(p.topic, p.partition)
        return response

    def CreatePartition(
        self, request: storage_pb2.CreatePartitionRequest, context: grpc.ServicerContext
    ) -> storage_pb2.CreatePartitionResponse:
        try:
            self.create_partition(
                request.topic, request.partition, request.leader_epoch, request.configs
            )
        except SeglogError as exc:
            abort(context, exc)
        return storage_pb2.CreatePartitionResponse()

    def DeletePartition(
        self, request: storage_pb2.DeletePartitionRequest, context: grpc.ServicerContext
    ) -> storage_pb2.DeletePartitionResponse:
        try:
            self.delete_partition(request.topic, request.partition)
        except SeglogError as exc:
            abort(context, exc)
        return storage_pb2.DeletePartitionResponse()

    def DescribePartitions(
        self, request: storage_pb2.DescribePartitionsRequest, context: grpc.ServicerContext
    ) -> storage_pb2.DescribePartitionsResponse:
        response = storage_pb2.DescribePartitionsResponse()
        wanted = [(p.topic, p.partition) for p in request.partitions] or sorted(self.logs.logs())
        for topic, partition in wanted:
            state = response.partitions.add(topic=topic, partition=partition)
            state.leader_epoch = self.leader_epoch(topic, partition)
            try:
                log = self.logs.get_log(topic, partition)
                state.log_start_offset = log.log_start_offset
                state.log_end_offset = log.log_end_offset
                state.size_bytes = log.size_in_bytes
                state.segment_count = len(log.segments)
            except SeglogError as exc:
                state.error = error_code_for(exc)
                state.log_start_offset = state.log_end_offset = -1
        return response
