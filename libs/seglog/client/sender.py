"""The producer's sender thread: drains the accumulator into Produce requests, one per leader
node and topic (sent as produce_transport.py says: straight to the leader, or through the
gateway), keeps up to `max_in_flight_requests_per_connection` in flight per node, and
settles each batch when its answer comes back.

The sender waits in its transport's selector (rpc/produce_selector.py), which reads the answers
of the requests the sender thread carries itself; answers that arrive on other threads (gRPC's,
or the produce-send threads of the direct path) are queued and wake it. Either way the sender
thread handles them itself, so the accumulator's deques and the callbacks are only ever
touched from here (callbacks run on the sender thread, as in Kafka's producer: keep them
short).

Idempotence (`enable_idempotence`, on by default as in Kafka): the sender takes a producer id
from the gateway (InitProducerId) and numbers each partition's batches with sequences when
they are first sent, so the leader recognises a retried batch and answers it with its
original offsets instead of writing it twice. One request per partition is in flight at a
time (the accumulator mutes a partition until its answer), so sequences reach the leader in
order; it carries the partition's new batches up to `max_request_size`, or one retried
batch (see the accumulator). An answer is believed only as far as its offsets go: batches
past its last offset are sent again, never acknowledged on trust. A batch that fails for good
after it had its sequence abandons the producer id (logged, counted in `producer_id_resets`).

Per batch: success resolves its futures with offsets counted from the partition's base offset;
a retriable error (leader moved or down, node restarting, timeout) puts it back at the front of
its partition to retry after `retry_backoff_ms`, refreshing metadata first when the leader may
have changed; anything else, or `retries` used up, or `delivery_timeout_ms` passed, fails it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import grpc

from ..errors import (
    LeaderNotAvailableError,
    NodeUnavailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    RequestTimedOutError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from ..rpc import wire
from ..rpc.status import error_from_code, error_from_rpc
from ..v1 import common_pb2
from .accumulator import ProduceRequestPlan, RecordAccumulator, Settlement
from .config import ProducerConfig
from .metadata import Metadata
from .outages import OutageLog
from .produce_transport import ProduceTransport
from .producer_batch import ProducerBatch
from .transactions import TransactionManager

logger = logging.getLogger(__name__)

# Errors after which the client's view of leaders may be wrong.
_METADATA_ERRORS = (
    NotLeaderError,
    LeaderNotAvailableError,
    NodeUnavailableError,
    UnknownTopicOrPartitionError,
)
# Refusals that will not go away by retrying soon: too few in-sync replicas (an ISR below
# min.insync.replicas, or a replication factor below it). Said once per partition when first
# met, and what a batch fails with when its retries end, rather than a bare timeout: a
# producer to such a topic was silent for 120 s, then said REQUEST_TIMED_OUT.
_DURABILITY_ERRORS = (NotEnoughReplicasError, NotEnoughReplicasAfterAppendError)
_IDLE_WAIT_S = 0.1
_SEQUENCE_WRAP = 2**31  # sequences wrap past Int.MaxValue to 0, as Kafka's


class Sender(threading.Thread):
    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        metadata: Metadata,
        produce: ProduceTransport,
        init_producer_id: Callable[[], tuple[int, int]] | None = None,
        transactions: TransactionManager | None = None,
    ) -> None:
        super().__init__(name=f"{config.client_id}-sender", daemon=True)
        self.config = config
        self.accumulator = accumulator
        self.metadata = metadata
        self.produce = produce
        self._selector = produce.selector
        self._answers: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._in_flight: dict[int, int] = {}
        self._running = True
        self._force_close = False
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._metadata_retry_at_s = 0.0
        self._metadata_outage = OutageLog(
            logger,
            "metadata refresh",
            backoff_ms=config.retry_backoff_ms,
            backoff_max_ms=config.retry_backoff_max_ms,
        )
        # What this round's answers settled, handed to the accumulator at the next `ready`.
        self._settled = Settlement()
        # Idempotence: the producer id and epoch, and each partition's next sequence. A
        # sequenced batch that fails leaves its partition's sequence unknown to us: a new
        # producer id is taken and sequences start again at 0 (Kafka bumps the epoch).
        self._init_producer_id = init_producer_id
        # A transactional producer's id and epoch are its transaction manager's (taken by
        # init_transactions, never reset here); each partition is added to the transaction
        # before its first batch goes out.
        self._transactions = transactions
        self._producer: tuple[int, int] | None = None
        self._sequences: dict[tuple[str, int], int] = {}
        self.producer_id_resets = 0  # read by Producer.metrics
        # Partitions whose writes the leader refuses for too few in-sync replicas, since it
        # was said (cleared, and said, when one is accepted again).
        self._durability_refused: set[tuple[str, int]] = set()

    def wakeup(self) -> None:
        self._selector.wakeup()

    def initiate_close(self, *, force: bool) -> None:
        """Stop after what is queued is sent (or at once, failing it, when `force`)."""
        self._force_close = self._force_close or force
        self._running = False
        self.wakeup()

    @property
    def in_flight_requests(self) -> int:
        return sum(self._in_flight.values())

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        while self._running:
            self._run_once()
        while not self._force_close and (
            self.accumulator.has_undrained() or self.in_flight_requests or self._settled
        ):
            self._run_once()
        for batch in self.accumulator.abort_all():
            self._fail(batch, SeglogError("the producer was closed before the batch was sent"))
        self._handle_answers()
        while self.in_flight_requests:
            self._selector.poll(self._request_timeout_s)
            self._handle_answers()
        self.accumulator.settle(self._take_settled(), time.monotonic())

    def _take_settled(self) -> Settlement:
        settled, self._settled = self._settled, Settlement()
        return settled

    def _run_once(self) -> None:
        self._handle_answers()
        now = time.monotonic()
        check = self.accumulator.ready(now, self._take_settled())
        for batch in check.expired:  # settled with the next round
            self._fail(batch, _delivery_timeout(batch, self.config))
        refresh = check.unknown_topics | {
            t for t in check.queued_topics if self.metadata.needs_refresh(t)
        }
        if refresh and now >= self._metadata_retry_at_s:
            error = self.metadata.try_refresh(refresh)
            if error is not None:
                # Logged once per outage (and per change of cause), not once per attempt;
                # the batches waiting for it expire by delivery_timeout_ms.
                topics = sorted(refresh)
                self._metadata_retry_at_s = now + self._metadata_outage.failed(
                    f"{topics}: {error}", key=f"{topics}: {error.reason}"
                )
            else:
                self._metadata_outage.succeeded()
        limit = self.config.max_in_flight_requests_per_connection
        if self._init_producer_id is not None and self._producer is None and check.nodes:
            try:
                self._producer = self._init_producer_id()
                self._sequences = {}
            except SeglogError as exc:
                logger.warning("InitProducerId failed, retrying: %s", exc)
                self._selector.poll(self.config.retry_backoff_ms / 1000)
                return
        for node_id in check.nodes:
            if self._in_flight.get(node_id, 0) >= limit:
                continue
            for plan in self.accumulator.drain(node_id, now):
                self._send(plan)
        if self._settled:
            wait_s = 0.0  # batches to hand back (expired, or acks=0): another round at once
        else:
            wait_s = min(check.wait_s, _IDLE_WAIT_S) if self._answers.empty() else 0
        self._selector.poll(wait_s)

    # -- requests ---------------------------------------------------------------------------

    def _send(self, plan: ProduceRequestPlan) -> None:
        transactions = self._transactions
        if transactions is not None:
            try:
                transactions.add_partitions((plan.topic, p) for p in plan.batches)
            except SeglogError as exc:
                for partition, batches in plan.batches.items():
                    self._settle_failed(plan.topic, partition, batches, exc, time.monotonic())
                return
            if transactions.producer != self._producer:
                self._producer, self._sequences = transactions.producer, {}
        if self._producer is not None:
            producer_id, epoch = self._producer
            for partition, batches in plan.batches.items():
                tp = (plan.topic, partition)
                for batch in batches:
                    if batch.base_sequence is None:
                        sequence = self._sequences.get(tp, 0)
                        batch.stamp_producer(
                            producer_id, epoch, sequence, transactional=transactions is not None
                        )
                        self._sequences[tp] = (sequence + batch.record_count) % _SEQUENCE_WRAP
        info = self.metadata.cached(plan.topic)
        request = wire.encode_produce_request(
            plan.topic,
            self.config.acks,
            self.config.request_timeout_ms,
            [
                (
                    partition,
                    info.partitions[partition].leader_epoch if info is not None else -1,
                    [batch.encoded for batch in batches],
                )
                for partition, batches in plan.batches.items()
            ],
            transactional_id=self.config.transactional_id if transactions is not None else None,
        )
        self._in_flight[plan.node_id] = self._in_flight.get(plan.node_id, 0) + 1
        call = self.produce.send(
            plan.node_id, plan.topic, self.config.acks, request, self._request_timeout_s
        )
        if self.config.acks == 0:
            # Nobody waits for an answer: the records count as sent now, as in Kafka.
            for partition, batches in plan.batches.items():
                for batch in batches:
                    self._succeed(batch, -1, -1)
                self._settled.unmuted.append((plan.topic, partition))
            call.add_done_callback(lambda _: self._post(lambda: self._request_done(plan.node_id)))
            return
        call.add_done_callback(lambda answered: self._post(lambda: self._on_answer(plan, answered)))

    def _post(self, handler: Callable[[], None]) -> None:
        self._answers.put(handler)
        if threading.get_ident() != self.ident:
            # Answered on another thread. One the selector read is taken at the next round.
            self._selector.wakeup()

    def _handle_answers(self) -> None:
        while True:
            try:
                handler = self._answers.get_nowait()
            except queue.Empty:
                return
            handler()

    def _request_done(self, node_id: int) -> None:
        self._in_flight[node_id] -= 1

    def _on_answer(
        self, plan: ProduceRequestPlan, call: Future[common_pb2.ProduceResponse]
    ) -> None:
        self._request_done(plan.node_id)
        now = time.monotonic()
        try:
            response = call.result()
        except Exception as exc:
            error = _call_error(exc)
            for partition, batches in plan.batches.items():
                self._settle_failed(plan.topic, partition, batches, error, now)
            return
        answered = set()
        for result in response.partitions:
            if result.partition not in plan.batches or result.partition in answered:
                continue
            batches = plan.batches[result.partition]
            answered.add(result.partition)
            if result.error:
                error = error_from_code(result.error, result.error_message)
                self._settle_failed(plan.topic, result.partition, batches, error, now)
                continue
            covered = _covered(batches, result.base_offset, result.last_offset)
            base_offset = result.base_offset
            for batch in batches[:covered]:
                self._succeed(batch, base_offset, result.log_append_time_ms)
                base_offset += batch.record_count
            if covered < len(batches):
                # Never acknowledge records an answer does not account for: they may not be
                # in the log at all. Retried, they are answered for one by one.
                error = UnansweredBatchesError(
                    f"{plan.topic}-{result.partition}: the answer covers offsets "
                    f"{result.base_offset}..{result.last_offset}, {covered} of "
                    f"{len(batches)} batches ({sum(b.record_count for b in batches)} records)"
                )
                logger.warning("%s; retrying the rest", error)
                self._settle_failed(plan.topic, result.partition, batches[covered:], error, now)
                continue
            self._settled.unmuted.append((plan.topic, result.partition))
        for partition, batches in plan.batches.items():
            if partition not in answered:
                error = SeglogError(f"no answer for {plan.topic}-{partition} in the response")
                self._settle_failed(plan.topic, partition, batches, error, now)

    def _settle_failed(
        self,
        topic: str,
        partition: int,
        batches: list[ProducerBatch],
        error: SeglogError,
        now_s: float,
    ) -> None:
        if isinstance(error, _METADATA_ERRORS):
            self.metadata.invalidate(topic)
        if isinstance(error, _DURABILITY_ERRORS) and (topic, partition) not in (
            self._durability_refused
        ):
            self._durability_refused.add((topic, partition))
            logger.warning(
                "%s: %s (retrying for up to delivery.timeout.ms, %d ms)",
                error.reason,
                error,
                self.config.delivery_timeout_ms,
            )
        for batch in batches:
            batch.last_error = error
        timeout_s = self.config.delivery_timeout_ms / 1000
        # Batches are in partition order, oldest first: those that may not retry form a
        # prefix; the rest go back to the front of the partition, order intact.
        failed = 0
        for batch in batches:
            if (
                error.retriable
                and not self._force_close
                and batch.attempts < self.config.retries
                and now_s - batch.created_s < timeout_s
            ):
                break
            past_deadline = now_s - batch.created_s >= timeout_s
            self._fail(batch, _delivery_timeout(batch, self.config) if past_deadline else error)
            failed += 1
        if failed < len(batches):
            logger.debug("retrying %s-%d: %s", topic, partition, error)
            self._settled.retries.extend(batches[failed:])
        self._settled.unmuted.append((topic, partition))

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        if self._durability_refused and (batch.topic, batch.partition) in self._durability_refused:
            self._durability_refused.discard((batch.topic, batch.partition))
            logger.info("%s-%d accepts writes again", batch.topic, batch.partition)
        batch.complete(base_offset, log_append_time_ms, None)
        self._settled.completed.append(batch)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        if self._transactions is not None:
            # The transaction can only be aborted now (the abort resets what the partitions
            # hold of it); the producer id stays the transactional id's.
            self._transactions.batch_failed(error)
        elif (
            batch.base_sequence is not None
            and self._init_producer_id is not None
            and self._producer is not None
        ):
            # Its partition's sequence is now unknown to us: a new producer id starts every
            # partition afresh (Kafka bumps the epoch). Said out loud and counted: a silent
            # change hid the loss of issue 26.
            self.producer_id_resets += 1
            logger.warning(
                "producer id %d (epoch %d) abandoned: a batch of %d records for %s-%d with "
                "sequence %d failed (%s); the next batches take a new producer id",
                self._producer[0],
                self._producer[1],
                batch.record_count,
                batch.topic,
                batch.partition,
                batch.base_sequence,
                error,
            )
            self._producer = None
        batch.complete(-1, -1, error)
        self._settled.completed.append(batch)


def _call_error(exc: Exception) -> SeglogError:
    """What a failed produce call stands for: gRPC's status, the bulk path's own error, or
    anything else that cut the call short (retriable: the leader may have written the
    request, and an idempotent retry is answered with its offsets)."""
    if isinstance(exc, grpc.RpcError):
        return error_from_rpc(exc)
    if isinstance(exc, SeglogError):
        return exc
    return LeaderNotAvailableError(f"the produce call failed: {type(exc).__name__}: {exc}")


class UnansweredBatchesError(SeglogError):
    """An answer that accounts for fewer records than the request carried (a node that
    answered a retry for only its first batch did so): the rest are sent again."""

    retriable = True


def _covered(batches: list[ProducerBatch], base_offset: int, last_offset: int) -> int:
    """How many of `batches`, oldest first, the answer's offsets account for: all when the
    answer has no last offset (an older node, or acks=0), else the prefix that fits."""
    if last_offset < 0:
        return len(batches)
    room = last_offset - base_offset + 1
    covered = 0
    for batch in batches:
        room -= batch.record_count
        if room < 0:
            break
        covered += 1
    return covered


def _delivery_timeout(batch: ProducerBatch, config: ProducerConfig) -> SeglogError:
    """REQUEST_TIMED_OUT, or the refusal that kept the batch from being written (the node's
    NOT_ENOUGH_REPLICAS) when that was the last attempt's answer."""
    age_ms = int((time.monotonic() - batch.created_s) * 1000)
    expired = (
        f"{batch.record_count} records for {batch.topic}-{batch.partition} expired: "
        f"{age_ms} ms since the batch was created, past delivery_timeout_ms "
        f"({config.delivery_timeout_ms}) after {batch.attempts + 1} attempts"
    )
    if isinstance(batch.last_error, _DURABILITY_ERRORS):
        return type(batch.last_error)(f"{batch.last_error}; {expired}")
    return RequestTimedOutError(expired)
