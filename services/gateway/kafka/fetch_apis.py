"""Fetch 4–17 over the broker core's data plane (routing/data_plane.py: the gRPC path's
routing, checks and semantics, ACLs checked on the caller): the record batches come back as
the stored bytes, never decoded here.

One core fetch for the whole request (it splits by leader node and long-polls with
max_wait_ms/min_bytes on the nodes). The stored batches are relayed unchanged and uncopied
(the answer is framed as buffers, record sets as views: fetch_encoding.py), the batch
holding a mid-batch fetch offset included whole (clients skip its earlier records). The
client's isolation_level goes to the nodes: READ_COMMITTED reads stop at the last stable
offset and answer the aborted transactions in the range read (a list, maybe empty);
READ_UNCOMMITTED answers them null, as Kafka's broker does. Every answer carries the LSO.

Topic ids (KIP-516): from v13 requests and answers name topics by id. Each id is resolved
through the registry on every request, and checked again once the records are read, so a
topic deleted and made again under its name is never read through its old id: an id no topic
has (now) answers UNKNOWN_TOPIC_ID on each of its partitions, as Kafka's broker does.

Fetch sessions (KIP-227, v7+) are kept per listener, as fetch_sessions.py says: a full request
(epoch 0) opens one, incremental requests name only what changed and are answered only the
partitions with records, a changed high watermark or log start offset, or an error, in the
session's order (a partition that answered records goes last, so the byte budget goes round).
A session's errors answer the top-level code with no partitions and session id 0, as Kafka's
SessionErrorContext does. Each gateway's listener keeps its own sessions: a client's session
is with the broker (lane) it fetches from.

NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH answers name the current leader (v12+) and its
endpoint (v16+): fetch_leaders.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from kafka.protocol.consumer import FetchRequest, FetchResponse

from seglog.errors import SeglogError

from ..routing.data_plane import FetchPosition, FetchQuery
from .api_table import ApiTable
from .data_call_end import call_scope
from .error_codes import NONE, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION
from .error_table import DataApi, data_error_code
from .fetch_encoding import encode_fetch_response
from .fetch_leaders import FetchLeaderHints
from .fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION,
    CachedPartition,
    FetchSessionCache,
    FetchSessionSettings,
    PartitionFetch,
    PartitionKey,
    SessionError,
)
from .framing import ScatteredFrame
from .kafka_call import KafkaCall
from .topic_ids import from_wire, to_wire

NO_OFFSET = -1
FIRST_SESSION_VERSION = 7
FIRST_BY_ID_VERSION = 13  # topics named by id (KIP-516)
# Kafka's broker fetch.max.bytes (55 MiB): a client's max_bytes is capped to it, so what one
# connection's fetch holds is bounded whatever the client asks.
FETCH_MAX_BYTES = 55 * 1024 * 1024
# For a connection not made by a listener (it keeps the sessions): every request sessionless.
_NO_SESSIONS = FetchSessionCache(FetchSessionSettings(max_incremental_fetch_session_cache_slots=0))


def _query(request: Any, positions: list[FetchPosition]) -> FetchQuery:
    return FetchQuery(
        positions,
        max_bytes=max(1, min(request.max_bytes, FETCH_MAX_BYTES)),
        min_bytes=request.min_bytes,
        max_wait_ms=request.max_wait_ms,
        isolation_level=request.isolation_level,
    )


READ_COMMITTED = 1


class AbortedTransaction(NamedTuple):
    producer_id: int
    first_offset: int


def _committed(request: Any) -> bool:
    return bool(request.isolation_level == READ_COMMITTED)


class _PartitionAnswer:
    __slots__ = ("aborted", "error", "high_watermark", "last_stable", "log_start_offset", "records")

    def __init__(self) -> None:
        self.error = NONE
        self.high_watermark = NO_OFFSET
        self.last_stable = NO_OFFSET
        self.log_start_offset = NO_OFFSET
        self.records: list[bytes | memoryview] = []
        self.aborted: dict[tuple[int, int], None] = {}  # (producer id, first offset), in order


def _gather(call: KafkaCall, query: FetchQuery) -> dict[tuple[str, int], _PartitionAnswer]:
    """Each partition's answer from the core's fetch (a partition's batches may come in
    several pieces, each of whole batches, in offset order).

    The fetch spans leader nodes, each long-polling on its own for the request's min_bytes:
    once one node's answer is complete the nodes that have sent nothing are given up
    (routing/fetch_fanout.py), as Kafka's broker answers once the request as a whole has
    min_bytes, and the partitions not answered yet are asked again without waiting, so every
    partition is in the answer. The core keeps
    each read within its max_bytes and partition_max_bytes (routing/fetch_budget.py); the
    second read gets what the first left, and no first batch past it once the answer holds
    data."""
    answers = {(p.topic, p.partition): _PartitionAnswer() for p in query.positions}
    answered: set[tuple[str, int]] = set()
    taken = _read(call, query, answers, answered)
    unanswered = [p for p in query.positions if (p.topic, p.partition) not in answered]
    if unanswered and len(unanswered) < len(query.positions):
        rest = FetchQuery(
            unanswered, max_bytes=max(1, query.max_bytes - taken), keep_first_batch=taken == 0
        )
        _read(call, rest, answers, answered)
    return answers


def _read(
    call: KafkaCall,
    query: FetchQuery,
    answers: dict[tuple[str, int], _PartitionAnswer],
    answered: set[tuple[str, int]],
) -> int:
    """Reads the core's fetch into `answers` to its end; a fetch refused whole answers its
    error on every partition not answered yet. Returns the record bytes read.

    Never cut short at min_bytes: a node answers only once it has min_bytes or its wait is
    over (as a whole, in 1 MiB chunks), and the core already stops waiting for the silent
    nodes once one answered. Stopping at the first chunk threw away the rest of the node's
    answer, read already, and the next fetch asked for it again: a librdkafka read of 6 MB
    took 7 node answers, 3 of them cut and 3.03 MB discarded, instead of 4."""
    received_bytes = 0
    scope = call_scope(call)
    try:
        pieces = call.core.data_plane.fetch(call.caller, query, scope)
        for piece in pieces:
            key = (piece.topic, piece.partition)
            answer = answers.get(key)
            if answer is None:
                continue
            answered.add(key)
            if piece.error is not None:
                answer.error = data_error_code(DataApi.FETCH, piece.error)
            answer.high_watermark = piece.high_watermark
            answer.last_stable = piece.last_stable_offset
            answer.log_start_offset = piece.log_start_offset
            answer.aborted.update(dict.fromkeys(piece.aborted_transactions))
            if piece.records:
                answer.records.append(piece.records)
                received_bytes += len(piece.records)
    except SeglogError as exc:
        code = data_error_code(DataApi.FETCH, exc)
        for key, answer in answers.items():
            if key not in answered:
                answer.error = code
    finally:
        # The call's end first, as gRPC runs its callbacks when a client cancels: they
        # cancel the nodes' calls, which closing the fetch waits for.
        scope.finish()
        pieces.close()
    return received_bytes


# -- the request's partitions, keyed as its session keys them ---------------------------------


def _requested(request: Any, by_id: bool) -> list[tuple[PartitionKey, PartitionFetch]]:
    """The request's partitions, in order, keyed (topic id or name, partition): an id as the
    registry writes it ("" for the zero id, which no topic has). A partition named twice is
    fetched once, as the last naming asks (Kafka's broker reads them into a map)."""
    requested = {
        (from_wire(topic.topic_id) if by_id else topic.topic, p.partition): PartitionFetch(
            p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch
        )
        for topic in request.topics
        for p in topic.partitions
    }
    return list(requested.items())


def _forgotten(request: Any, version: int, by_id: bool) -> list[PartitionKey]:
    if version < FIRST_SESSION_VERSION:
        return []
    return [
        (from_wire(t.topic_id) if by_id else t.topic, partition)
        for t in request.forgotten_topics_data
        for partition in t.partitions
    ]


def _names(call: KafkaCall, keys: Iterable[PartitionKey], by_id: bool) -> dict[str, str]:
    """Each topic's name ("" for an id no topic has)."""
    topics = dict.fromkeys(topic for topic, _ in keys)
    if not by_id:
        return {t: t for t in topics}
    image = call.core.registry
    names = {}
    for topic_id in topics:
        try:
            names[topic_id] = image.topic_name_of(topic_id) if topic_id else ""
        except SeglogError:
            names[topic_id] = ""
    return names


def _still_named(call: KafkaCall, topic_id: str, name: str) -> bool:
    """Whether the topic called `name` still has the id the request named: checked after the
    read, so records of a topic made again under that name are never answered for the old
    id."""
    found = call.core.registry.topics.get(name)
    return found is not None and found.topic_id == topic_id


def _fetch(
    call: KafkaCall,
    request: Any,
    partitions: list[tuple[PartitionKey, PartitionFetch]],
    by_id: bool,
) -> tuple[dict[PartitionKey, _PartitionAnswer], dict[str, str]]:
    """Each partition's answer (an unknown topic id's: UNKNOWN_TOPIC_ID), and the names."""
    names = _names(call, (key for key, _ in partitions), by_id)
    positions = [
        FetchPosition(
            names[topic], partition, f.fetch_offset, f.partition_max_bytes, f.current_leader_epoch
        )
        for (topic, partition), f in partitions
        if names[topic]
    ]
    call.attributes["kafka.topics"] = ",".join([n for n in names.values() if n][:16])
    query = _query(request, positions)
    by_name = _gather(call, query) if positions else {}
    answers = {}
    for key, _ in partitions:
        topic, partition = key
        name = names[topic]
        answer = by_name.get((name, partition)) if name else None
        if answer is None or (by_id and not _still_named(call, topic, name)):
            answer = _PartitionAnswer()
            answer.error = UNKNOWN_TOPIC_ID if by_id else UNKNOWN_TOPIC_OR_PARTITION
        answers[key] = answer
    return answers, names


# -- the answer ------------------------------------------------------------------------------


def _encode(
    call: KafkaCall,
    keys: list[PartitionKey],
    answers: dict[PartitionKey, _PartitionAnswer],
    names: dict[str, str],
    session_id: int,
    read_committed: bool,
) -> ScatteredFrame:
    """The answer for `keys` in that order, consecutive partitions of a topic under one
    topic entry (as Kafka's FetchResponse.of groups them), framed as buffers whose record
    sets are the nodes' bytes, never copied into one answer (fetch_encoding.py)."""
    response_class = FetchResponse[call.version]
    topic_class = response_class.FetchableTopicResponse
    partition_class = topic_class.PartitionData
    by_id = call.version >= FIRST_BY_ID_VERSION
    leaders = FetchLeaderHints(call)

    topics: list[Any] = []
    last_topic = None
    for topic, partition in keys:
        answer = answers[(topic, partition)]
        data = partition_class(
            partition_index=partition,
            error_code=answer.error,
            high_watermark=answer.high_watermark,
            last_stable_offset=(
                answer.last_stable if answer.last_stable >= 0 else answer.high_watermark
            ),
            log_start_offset=answer.log_start_offset,
            aborted_transactions=(  # null on errors too, as Kafka's partitionResponse(error)
                [AbortedTransaction(p, f) for p, f in answer.aborted]
                if read_committed and answer.error == NONE
                else None
            ),
            preferred_read_replica=-1,
            records=_records(answer),
            current_leader=leaders.current_leader(
                partition_class, names.get(topic, ""), partition, answer.error
            ),
        )
        if topic != last_topic:
            entry = (
                topic_class(topic_id=to_wire(topic), partitions=[])
                if by_id
                else topic_class(topic=topic, partitions=[])
            )
            topics.append(entry)
            last_topic = topic
        topics[-1].partitions.append(data)
    response = response_class(
        throttle_time_ms=call.throttle_time_ms,
        error_code=NONE,
        session_id=session_id,
        responses=topics,
        node_endpoints=leaders.node_endpoints(response_class),
    )
    return ScatteredFrame(encode_fetch_response(response, call.version, call.correlation_id))


def _records(answer: _PartitionAnswer) -> bytes | memoryview:
    """The partition's records: its one piece (the usual case) as the view of the node's
    bytes it is, written to the socket from there (fetch_encoding.py); several joined (a
    partition's records are one field)."""
    if answer.error != NONE or not answer.records:
        return b""
    if len(answer.records) == 1:
        return answer.records[0]
    return b"".join(answer.records)


def _session_error(call: KafkaCall, code: int) -> Any:
    return FetchResponse[call.version](
        throttle_time_ms=0, error_code=code, session_id=NO_SESSION, responses=[]
    )


def _cached(answer: _PartitionAnswer, fetch: PartitionFetch) -> CachedPartition:
    cached = CachedPartition(fetch)
    cached.must_answer(
        answer.error, answer.high_watermark, answer.log_start_offset, bool(answer.records)
    )
    return cached


def fetch(call: KafkaCall, request: Any) -> Any:
    version = call.version
    by_id = version >= FIRST_BY_ID_VERSION
    session_id = request.session_id if version >= FIRST_SESSION_VERSION else NO_SESSION
    epoch = request.session_epoch if version >= FIRST_SESSION_VERSION else FINAL_EPOCH
    requested = _requested(request, by_id)
    sessions = call.session.fetch_sessions
    if sessions is None:
        sessions = _NO_SESSIONS
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        # A full or sessionless request closes the session it names (FetchManager.newContext).
        sessions.close(session_id, call.principal)
        answers, names = _fetch(call, request, requested, by_id)
        new_session = NO_SESSION
        if epoch == INITIAL_EPOCH and version >= FIRST_SESSION_VERSION:
            new_session = sessions.create(
                by_id, {key: _cached(answers[key], f) for key, f in requested}, call.principal
            )
        keys = [key for key, _ in requested]
        return _encode(call, keys, answers, names, new_session, _committed(request))
    try:
        session = sessions.incremental(
            session_id,
            epoch,
            by_id,
            requested,
            _forgotten(request, version, by_id),
            call.principal,
        )
    except SessionError as exc:
        return _session_error(call, exc.code)
    if session is None:  # the request left it empty: closed, answered sessionless
        answers, names = _fetch(call, request, requested, by_id)
        keys = [key for key, _ in requested]
        return _encode(call, keys, answers, names, NO_SESSION, _committed(request))
    answers, names = _fetch(call, request, session.fetches, by_id)
    answered = sessions.answered(
        session.session,
        (
            (key, a.error, a.high_watermark, a.log_start_offset, bool(a.records))
            for key, a in answers.items()
        ),
    )
    return _encode(call, answered, answers, names, session.session.id, _committed(request))


def register(table: ApiTable) -> None:
    table.register(FetchRequest, 4, 17, fetch)
