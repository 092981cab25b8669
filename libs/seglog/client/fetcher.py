"""The consumer's fetcher: a background thread that keeps one Fetch stream in flight while
the caller works through what came before (pipelining); what it brought is decoded on the
caller's thread (fetched.py).

Each partition has a `position` (the next offset handed to the caller) and a `fetch_offset`
(the next offset to ask for), which runs ahead of it by what is buffered. A partition is
fetched again only while its undecoded buffered bytes stay below
`max_partition_fetch_bytes`, and nothing is fetched while the whole buffer exceeds
`fetch_max_bytes`, so memory is bounded at about one fetch ahead.

A seek or a change of assignment gives the partition a new `epoch`, never used before by
this fetcher (a partition assigned again after a rebalance must not match data fetched for
its previous assignment: that data, from the old position, was handed out after the new
assignment had set its position to the committed offset, and the reads went backwards): data
fetched for an older epoch is dropped when it arrives, and the stream in flight is cancelled
so the next request carries the new positions at once. The fetch thread reads only batch
headers (to learn the next fetch offset); records are decoded by `collect` on the caller's
thread.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from ..errors import PermissionDeniedError, SeglogError
from ..records import Record
from ..rpc.bulk_client import BulkMessage
from ..rpc.status import error_from_code, error_from_rpc
from ..security.tls import ClientSecurity
from ..v1 import common_pb2, gateway_pb2_grpc
from .bulk import BulkReader
from .config import ISOLATION_LEVELS, ConsumerConfig
from .fetched import CompletedFetch, Pending, decode, fetch_request, next_offset_after
from .outages import OutageLog
from .structs import TopicPartition

logger = logging.getLogger(__name__)


@dataclass
class PartitionState:
    position: int | None = None
    # The leader epoch of the batch holding the last record handed out (Kafka's
    # offsetEpoch): commits carry it, -1 after a seek.
    position_epoch: int = -1
    fetch_offset: int | None = None
    epoch: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    buffered_bytes: int = 0
    paused: bool = False
    # An error the fetch thread met, for the caller's next poll to handle or raise.
    error: SeglogError | None = None


class Fetcher:
    def __init__(
        self,
        config: ConsumerConfig,
        stub: gateway_pb2_grpc.GatewayStub,
        security: ClientSecurity | None = None,
    ) -> None:
        self.config = config
        self.stub = stub
        self._lock = threading.Lock()
        self._data_ready = threading.Condition(self._lock)
        self._work = threading.Condition(self._lock)
        self.states: dict[TopicPartition, PartitionState] = {}
        self._epochs = itertools.count(1)  # every PartitionState.epoch this fetcher gives
        self._completed: collections.deque[CompletedFetch] = collections.deque()
        self._pending: collections.deque[Pending] = collections.deque()
        self._buffered_bytes = 0
        self._call: grpc.Call | None = None
        self._bulk = BulkReader(
            stub,
            config.request_timeout_ms / 1000,
            ssl_context=None if security is None else security.ssl_context(),
        )
        self._closed = False
        # Partitions the gateway or a leader could not serve this round, by error reason,
        # for one log line per outage (a deleted topic, a stopped cluster), not silence.
        self._round_failures: dict[str, set[str]] = {}
        self._outage = OutageLog(
            logger,
            "fetching",
            backoff_ms=config.retry_backoff_ms,
            backoff_max_ms=config.retry_backoff_max_ms,
        )
        self._thread = threading.Thread(
            target=self._run, name=f"{config.client_id}-fetcher", daemon=True
        )
        self._thread.start()

    # -- the caller's side ------------------------------------------------------------------

    def assign(self, partitions: set[TopicPartition]) -> None:
        with self._lock:
            for tp in list(self.states):
                if tp not in partitions:
                    del self.states[tp]
            for tp in partitions:
                if tp not in self.states:
                    self.states[tp] = PartitionState(epoch=next(self._epochs))
            self._pending = collections.deque(p for p in self._pending if p.tp in partitions)
            self._interrupt()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            state = self.states.get(tp)
            if state is None:
                raise SeglogError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
            state.position = state.fetch_offset = offset
            state.position_epoch = -1
            state.epoch = next(self._epochs)
            state.buffered_bytes = 0
            state.error = None
            self._pending = collections.deque(p for p in self._pending if p.tp != tp)
            self._interrupt()

    def set_paused(self, tps: set[TopicPartition], paused: bool) -> None:
        with self._lock:
            for tp in tps:
                if tp in self.states:
                    self.states[tp].paused = paused
            self._interrupt()

    def paused(self) -> set[TopicPartition]:
        with self._lock:
            return {tp for tp, s in self.states.items() if s.paused}

    def high_watermark(self, tp: TopicPartition) -> int | None:
        with self._lock:
            state = self.states.get(tp)
            return None if state is None or state.high_watermark < 0 else state.high_watermark

    def positions(self) -> dict[TopicPartition, int | None]:
        with self._lock:
            return {tp: s.position for tp, s in self.states.items()}

    def positions_with_epochs(self) -> dict[TopicPartition, tuple[int, int]]:
        """Known positions with the leader epoch of the last record handed out before each."""
        with self._lock:
            return {
                tp: (s.position, s.position_epoch)
                for tp, s in self.states.items()
                if s.position is not None
            }

    def missing_positions(self) -> list[TopicPartition]:
        with self._lock:
            return [tp for tp, s in self.states.items() if s.position is None]

    def errors(self) -> list[tuple[TopicPartition, SeglogError]]:
        """Errors met since the last call, cleared; the partition stops until it is sought."""
        with self._lock:
            out = [(tp, s.error) for tp, s in self.states.items() if s.error is not None]
            for tp, _ in out:
                self.states[tp].error = None
            return out

    def collect(self, max_records: int) -> list[Record]:
        """Up to `max_records` decoded records, in fetch order, advancing positions."""
        out: list[Record] = []
        while len(out) < max_records:
            pending = self._next_pending()
            if pending is None:
                break
            take = max_records - len(out)
            records = pending.records
            chunk = records[pending.index : pending.index + take]
            pending.index += len(chunk)
            with self._lock:
                state = self.states.get(pending.tp)
                if state is None or state.epoch != pending.epoch:
                    self._drop_pending(pending)
                    continue
                out.extend(chunk)
                if chunk:
                    slot = bisect.bisect_right(pending.batch_starts, pending.index - 1) - 1
                    state.position_epoch = pending.batch_epochs[slot] if slot >= 0 else -1
                if pending.index >= len(records):
                    self._drop_pending(pending)
                    if pending.error is None:
                        state.position = pending.next_offset
                    else:
                        self._stop_at_corrupt_batch(state, pending)
                elif chunk:
                    state.position = chunk[-1].offset + 1
        return out

    def wait_for_data(self, timeout_s: float) -> None:
        with self._lock:
            if not self._completed and not self._pending and not self._has_errors():
                self._data_ready.wait(timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._interrupt()
        self._thread.join(timeout=5)
        self._bulk.close()

    def _stop_at_corrupt_batch(self, state: PartitionState, pending: Pending) -> None:
        """As Kafka's consumer: the position stays at the batch that would not decode, so
        every poll raises for it (fetching it again) until the caller seeks past it; nothing
        after it is delivered, so nothing is skipped (the lock is held)."""
        state.position = state.fetch_offset = pending.error_offset
        state.epoch = next(self._epochs)  # drops what was fetched after the corrupt batch
        state.buffered_bytes = 0
        state.error = pending.error
        self._pending = collections.deque(p for p in self._pending if p.tp != pending.tp)
        self._interrupt()

    def _has_errors(self) -> bool:
        return any(s.error is not None for s in self.states.values())

    def _drop_pending(self, pending: Pending) -> None:
        if self._pending and self._pending[0] is pending:
            self._pending.popleft()

    def _next_pending(self) -> Pending | None:
        """The partly served fetch, or the next completed one, decoded."""
        with self._lock:
            if self._pending:
                return self._pending[0]
            while self._completed:
                fetch = self._completed.popleft()
                self._buffered_bytes -= len(fetch.records)
                state = self.states.get(fetch.tp)
                if state is None or state.epoch != fetch.epoch:
                    continue
                state.buffered_bytes -= len(fetch.records)
                position = state.position if state.position is not None else 0
                break
            else:
                return None
            self._work.notify()  # room to fetch more
        pending = decode(fetch, position, check_crcs=self.config.check_crcs)
        with self._lock:
            self._pending.append(pending)
        return pending

    # -- the fetch thread -------------------------------------------------------------------

    def _interrupt(self) -> None:
        """Cancel the stream in flight and wake the thread (the lock is held)."""
        call = self._call
        if call is not None:
            call.cancel()
        self._bulk.interrupt()
        self._work.notify_all()
        self._data_ready.notify_all()

    def _fetchable(self) -> list[tuple[TopicPartition, int, int]]:
        if self._buffered_bytes >= self.config.fetch_max_bytes:
            return []
        return [
            (tp, s.fetch_offset, s.epoch)
            for tp, s in self.states.items()
            if s.fetch_offset is not None
            and not s.paused
            and s.error is None
            and s.buffered_bytes < self.config.max_partition_fetch_bytes
        ]

    def _run(self) -> None:
        transport = self.config.fetch_transport
        while True:
            with self._lock:
                if self._closed:
                    return
                wanted = self._fetchable()
                if not wanted:
                    self._work.wait(0.5)
                    continue
                epochs = {tp: epoch for tp, _, epoch in wanted}
            rest = wanted
            failed = False
            bulk_busy = False
            self._round_failures = {}
            if transport != "grpc":
                rest, failed, bulk_busy = self._bulk_round(wanted, epochs)
                if transport == "bulk" and rest:
                    failed = True  # forced: these wait for a grant instead of the gateway
                    rest = []
            if rest:
                # The gateway's fetch long-polls only when the bulk side had nothing to do.
                failed |= self._grpc_round(rest, epochs, wait=not bulk_busy)
            if failed and not self._round_failures:
                # A bulk answer cut short (a seek, a pause, a node's connection lost): the
                # gateway serves these next round; not an outage by itself.
                time.sleep(self.config.retry_backoff_ms / 1000)
            elif failed:
                # A leader is down or moving, the topic gone, the cluster away: back off.
                failures = self._round_failures
                reasons = "; ".join(f"{r} for {sorted(t)}" for r, t in sorted(failures.items()))
                # One line per outage: a new line when other topics fail, not when the
                # same ones fail for a differently worded reason (bulk, then gateway).
                topics = str(sorted(set().union(*failures.values())))
                time.sleep(self._outage.failed(reasons, key=topics))
            elif self._outage.failing:
                self._outage.succeeded()

    def _request(
        self, partitions: list[tuple[TopicPartition, int]], *, wait: bool
    ) -> common_pb2.FetchRequest:
        return fetch_request(
            partitions,
            min_bytes=self.config.fetch_min_bytes,
            max_wait_ms=self.config.fetch_max_wait_ms if wait else 0,
            max_bytes=self.config.fetch_max_bytes,
            partition_max_bytes=self.config.max_partition_fetch_bytes,
            isolation_level=ISOLATION_LEVELS[self.config.isolation_level],
        )

    def _bulk_round(
        self,
        wanted: list[tuple[TopicPartition, int, int]],
        epochs: dict[TopicPartition, int],
    ) -> tuple[list[tuple[TopicPartition, int, int]], bool, bool]:
        """What has a grant, from the leaders' bulk listeners (client/bulk.py), each node's
        answer taken as it comes; returns what must go through the gateway, whether a
        retriable error was met, and whether the bulk side sent or read anything."""
        rest, failed, busy = self._bulk.fetch_some(
            [(tp, offset) for tp, offset, _ in wanted],
            self._request,
            self._on_message,
            (self.config.fetch_max_wait_ms + self.config.request_timeout_ms) / 1000,
            epochs,
        )
        return [w for w in wanted if w[0] in rest], failed, busy

    def _grpc_round(
        self,
        wanted: list[tuple[TopicPartition, int, int]],
        epochs: dict[TopicPartition, int],
        *,
        wait: bool,
    ) -> bool:
        """One Fetch through the gateway; True when a retriable error was met."""
        with self._lock:
            if self._closed:
                return False
            request = self._request([(tp, offset) for tp, offset, _ in wanted], wait=wait)
            timeout_s = (self.config.fetch_max_wait_ms + self.config.request_timeout_ms) / 1000
            call = self.stub.Fetch(request, timeout=timeout_s)
            self._call = call
        try:
            failed = False
            for message in call:
                failed |= self._on_message(message, epochs)
            return failed
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                error = error_from_rpc(exc)
                logger.debug("fetch failed: %s", error)
                if isinstance(error, PermissionDeniedError):
                    # Kafka's TopicAuthorizationException: the caller's poll raises it (each
                    # partition's, until it is sought), not an outage to wait out.
                    self._fail_partitions(wanted, epochs, error)
                    return False
                topics = {tp.topic for tp, _, _ in wanted}
                self._round_failures.setdefault(error.reason, set()).update(topics)
                return True
            return False
        finally:
            with self._lock:
                self._call = None

    def _fail_partitions(
        self,
        wanted: list[tuple[TopicPartition, int, int]],
        epochs: Mapping[TopicPartition, int],
        error: SeglogError,
    ) -> None:
        with self._lock:
            for tp, _, _ in wanted:
                state = self.states.get(tp)
                if state is not None and state.epoch == epochs.get(tp):
                    state.error = error
            self._data_ready.notify_all()

    def _on_message(
        self,
        message: common_pb2.FetchResponse | BulkMessage,
        epochs: Mapping[TopicPartition, int],
    ) -> bool:
        """Buffer one message's batches; True when it carried a retriable error."""
        tp = TopicPartition(message.topic, message.partition)
        with self._lock:
            state = self.states.get(tp)
            if state is None or state.epoch != epochs.get(tp) or state.fetch_offset is None:
                return False
            if message.error:
                error = error_from_code(message.error, message.error_message)
                if error.retriable:
                    self._round_failures.setdefault(error.reason, set()).add(tp.topic)
                    return True  # asked again next round
                logger.info(
                    "%s-%d: fetch at %d (position %s) answered %s: %s",
                    tp.topic,
                    tp.partition,
                    state.fetch_offset,
                    state.position,
                    error.reason,
                    message.error_message,
                )
                state.error = error
                self._data_ready.notify_all()
                return False
            state.high_watermark = message.high_watermark
            state.log_start_offset = message.log_start_offset
            records = message.records
            if not records:
                return False
            next_offset = next_offset_after(records, state.fetch_offset)
            if next_offset <= state.fetch_offset:
                return False
            aborted = tuple((a.producer_id, a.first_offset) for a in message.aborted_transactions)
            self._completed.append(CompletedFetch(tp, state.epoch, records, next_offset, aborted))
            state.fetch_offset = next_offset
            state.buffered_bytes += len(records)
            self._buffered_bytes += len(records)
            self._data_ready.notify_all()
            return False
