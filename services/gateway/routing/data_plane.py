"""The broker core's data plane: Produce, Fetch and ListOffsets for a `Caller`, in typed
requests and answers: the Kafka listener's way in, and the gRPC service's ListOffsets (its
Produce and Fetch keep the node-facing wire format: relayed_calls.py).

It authorizes explicitly (Authorization.check/allows on the caller, never a guarded gRPC
call): a topic the caller may not Write, Read or Describe is refused on its own partitions,
the others served, as Kafka's broker answers. Errors are SeglogErrors on each partition (or
raised for a request refused whole); each adapter maps them to its protocol's codes. The
record bytes go from the adapter's buffer to the node's wire in one copy (the node-facing
ProduceRequest is written from views of them), and come back as the node's bytes.

Several topics of one produce go out together: all their leaders' parts at once on the
relay's one pool (produce_routing.py), never a pool per request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from seglog.errors import PermissionDeniedError, SeglogError, error_classes
from seglog.rpc import check_entries, wire
from seglog.v1 import common_pb2

from ..authorization import Authorization
from ..broker.caller import Caller
from .call_scope import CallScope
from .fetch_answers import piece_of
from .fetch_routing import FetchRouting
from .leader_queries import LeaderQueries
from .produce_routing import ProduceRouting
from .quotas import ClientQuotas, quota_user

NO_OFFSET = -1
NO_LEADER_EPOCH = -1
_ERROR_CLASSES = error_classes()


# -- typed requests and answers ----------------------------------------------------------


class PartitionRecords(NamedTuple):
    partition: int
    # Whole batches, as the producer sent them: one buffer, or several (queued requests
    # coalesced) written out one after the other, never joined first.
    batches: Sequence[bytes | memoryview]


@dataclass(frozen=True)
class TopicProduce:
    """One topic's part of a produce request."""

    topic: str
    acks: int
    timeout_ms: int
    partitions: Sequence[PartitionRecords]


class ProducedPartition(NamedTuple):
    partition: int
    error: SeglogError | None
    base_offset: int = NO_OFFSET
    log_append_time_ms: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET


class FetchPosition(NamedTuple):
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = NO_LEADER_EPOCH  # -1: none named, the current leader's


@dataclass(frozen=True)
class FetchQuery:
    positions: Sequence[FetchPosition]
    max_bytes: int
    min_bytes: int = 1
    max_wait_ms: int = 0
    # Whether the answer's first batch is kept whatever its size (Kafka's minOneMessage);
    # False for a read whose answer already holds data from an earlier one.
    keep_first_batch: bool = True
    # Kafka's isolation_level: 1 (READ_COMMITTED) reads below the last stable offset and
    # learns the aborted transactions in the range read.
    isolation_level: int = 0
    # Whether what is read counts against the caller's consumer_byte_rate; False for a read
    # whose caller charges what it answers instead (ShareFetch reads ahead of what it hands
    # out, and Kafka meters a share fetch's answer).
    metered: bool = True


class FetchedPart(NamedTuple):
    """A piece of one partition's answer: a partition's records may come in several pieces
    (each whole batches, in offset order)."""

    topic: str
    partition: int
    error: SeglogError | None
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview  # a view of the buffer a node's chunk was received into
    last_stable_offset: int = NO_OFFSET
    # READ_COMMITTED: (producer id, first offset) of the transactions aborted in range.
    aborted_transactions: tuple[tuple[int, int], ...] = ()


class OffsetQuery(NamedTuple):
    topic: str
    partition: int
    timestamp: int  # ms, or ListOffsets' special values -1 to -5
    current_leader_epoch: int = NO_LEADER_EPOCH
    isolation_level: int = 0  # 1: READ_COMMITTED, offsets below the last stable offset


class ListedOffset(NamedTuple):
    topic: str
    partition: int
    error: SeglogError | None
    timestamp: int = NO_OFFSET
    offset: int = NO_OFFSET
    leader_epoch: int = NO_LEADER_EPOCH


def error_of(reason_code: int, message: str) -> SeglogError | None:
    """The SeglogError a node-facing answer's error code and message stand for."""
    if reason_code == common_pb2.NONE:
        return None
    reason = common_pb2.ErrorCode.Name(reason_code)
    return _ERROR_CLASSES.get(reason, SeglogError)(message or reason)


def leader_epoch_field(epoch: int) -> dict[str, int]:
    """A node-facing request's optional `current_leader_epoch`, set only when known (>= 0)."""
    return {"current_leader_epoch": epoch} if epoch >= 0 else {}


def _refusal(
    authorization: Authorization, caller: Caller, operation: str, topic: str, action: str
) -> PermissionDeniedError | None:
    """The caller's refusal to `operation` the topic (counted as the authorizer counts
    denials), or None when allowed."""
    try:
        authorization.check(caller, [(operation, "topic", topic)], action)
    except PermissionDeniedError as exc:
        return exc
    return None


# -- the core ----------------------------------------------------------------------------


class DataPlane:
    def __init__(
        self,
        producing: ProduceRouting,
        fetching: FetchRouting,
        queries: LeaderQueries,
        quotas: Callable[[], ClientQuotas | None],
        authorization: Authorization,
        record: Callable[[str, float], None],
    ) -> None:
        """`record(api, started)`: a request's duration in the gateway's request metrics,
        from its time.perf_counter() start, as the gRPC service records its own."""
        self.record = record
        self.producing = producing
        self.fetching = fetching
        self.queries = queries
        self.quotas = quotas  # the client quotas, once the gateway has set them
        self.authorization = authorization

    def produce(
        self, caller: Caller, topics: Sequence[TopicProduce], scope: CallScope
    ) -> list[list[ProducedPartition]]:
        """Each topic's per-partition results, in request order."""
        started = time.perf_counter()
        try:
            return self._produce(caller, topics, scope)
        finally:
            self.record("Produce", started)

    def _produce(
        self, caller: Caller, topics: Sequence[TopicProduce], scope: CallScope
    ) -> list[list[ProducedPartition]]:
        answers: list[list[ProducedPartition] | None] = [None] * len(topics)
        raws: list[bytes] = []
        sent: list[int] = []
        for i, topic in enumerate(topics):
            refusal = _refusal(self.authorization, caller, "Write", topic.topic, "Produce")
            if refusal is not None:
                answers[i] = _refused(topic, refusal)
                continue
            raws.append(
                wire.encode_produce_request(
                    topic.topic,
                    topic.acks,
                    topic.timeout_ms,
                    ((p.partition, NO_LEADER_EPOCH, p.batches) for p in topic.partitions),
                )
            )
            sent.append(i)
        routed = self.producing.produce_all(raws) if raws else []
        quotas = self.quotas()
        for i, raw, answer in zip(sent, raws, routed, strict=True):
            if isinstance(answer, SeglogError):
                answers[i] = _refused(topics[i], answer)
                continue
            if quotas is not None:
                user = quota_user(caller.principal)
                answer = quotas.hold_produce_of(
                    user, caller.client_id or "", scope, len(raw), answer
                )
            answers[i] = _produced(common_pb2.ProduceResponse.FromString(answer))
        return [answer if answer is not None else [] for answer in answers]

    def fetch(
        self, caller: Caller, query: FetchQuery, scope: CallScope
    ) -> Generator[FetchedPart, None, None]:
        """The answer's pieces as the leaders send them: first the partitions of topics the
        caller may not Read (refused alone), then the leaders' answers. The nodes' calls end
        with `scope` (which the adapter ends when it has what it needs) or when closed."""
        started = time.perf_counter()
        try:
            yield from self._fetch(caller, query, scope)
        finally:
            self.record("Fetch", started)

    def _fetch(
        self, caller: Caller, query: FetchQuery, scope: CallScope
    ) -> Generator[FetchedPart, None, None]:
        refusals = {
            topic: _refusal(self.authorization, caller, "Read", topic, "Fetch")
            for topic in {p.topic for p in query.positions}
        }
        request = common_pb2.FetchRequest(
            min_bytes=query.min_bytes,
            max_wait_ms=query.max_wait_ms,
            max_bytes=query.max_bytes,
            isolation_level=query.isolation_level,
        )
        for p in query.positions:
            refusal = refusals[p.topic]
            if refusal is not None:
                yield FetchedPart(
                    p.topic,
                    p.partition,
                    refusal,
                    NO_OFFSET,
                    NO_OFFSET,
                    b"",
                )
                continue
            part = request.partitions.add(
                topic=p.topic,
                partition=p.partition,
                fetch_offset=p.fetch_offset,
                partition_max_bytes=p.partition_max_bytes,
            )
            if p.current_leader_epoch >= 0:
                part.current_leader_epoch = p.current_leader_epoch
        if not request.partitions:
            return
        messages = self.fetching.fetch_messages(request, scope, keep_first=query.keep_first_batch)
        quotas = self.quotas()
        if quotas is not None and query.metered:
            user = quota_user(caller.principal)
            messages = quotas.hold_fetch_of(user, caller.client_id or "", scope, messages)
        try:
            for message in messages:
                fetched = piece_of(message)
                yield FetchedPart(
                    fetched.topic,
                    fetched.partition,
                    error_of(fetched.error, fetched.error_message),
                    fetched.high_watermark,
                    fetched.log_start_offset,
                    fetched.records,
                    fetched.last_stable_offset,
                    fetched.aborted_transactions,
                )
        finally:
            close = getattr(messages, "close", None)
            if close is not None:
                close()

    def list_offsets(self, caller: Caller, queries: Sequence[OffsetQuery]) -> list[ListedOffset]:
        """Each partition's offset for its timestamp, asked of its leader, in request order."""
        check_entries(len(queries), "ListOffsets partitions")
        refusals = {
            topic: _refusal(self.authorization, caller, "Describe", topic, "ListOffsets")
            for topic in {q.topic for q in queries}
        }
        asked = [
            common_pb2.ListOffsetsPartition(
                topic=q.topic,
                partition=q.partition,
                timestamp=q.timestamp,
                isolation_level=q.isolation_level,
                **leader_epoch_field(q.current_leader_epoch),
            )
            for q in queries
            if refusals[q.topic] is None
        ]
        results = iter(self.queries.per_leader_list_offsets(asked) if asked else [])
        answers = []
        for q in queries:
            refusal = refusals[q.topic]
            if refusal is not None:
                answers.append(ListedOffset(q.topic, q.partition, refusal))
                continue
            r = next(results)
            answers.append(
                ListedOffset(
                    q.topic,
                    q.partition,
                    error_of(r.error, r.error_message),
                    r.timestamp,
                    r.offset,
                    r.leader_epoch,
                )
            )
        return answers


def _refused(topic: TopicProduce, error: SeglogError) -> list[ProducedPartition]:
    return [ProducedPartition(p.partition, error) for p in topic.partitions]


def _produced(answer: common_pb2.ProduceResponse) -> list[ProducedPartition]:
    return [
        ProducedPartition(
            r.partition,
            error_of(r.error, r.error_message),
            r.base_offset,
            r.log_append_time_ms,
            r.log_start_offset,
        )
        for r in answer.partitions
    ]
