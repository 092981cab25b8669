"""Fetch 4–12 over the broker core's data plane (routing/data_plane.py: the gRPC path's
routing, checks and semantics, ACLs checked on the caller): the record batches come back as
the stored bytes, never decoded here.

One core fetch for the whole request (it splits by leader node and long-polls with
max_wait_ms/min_bytes on the nodes). The stored batches are relayed unchanged, the batch
holding a mid-batch fetch offset included whole (clients skip its earlier records). Fetch
sessions (v7+) are not kept: every answer has session_id 0, which clients take as
"sessionless" and go on sending full requests; an incremental request (a session id this
listener never gave) answers FETCH_SESSION_ID_NOT_FOUND. With no transactions, the last
stable offset is the high watermark and there are no aborted transactions.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse

from seglog.errors import SeglogError

from ..routing.data_plane import FetchPosition, FetchQuery
from .api_table import ApiTable
from .data_call_end import call_scope
from .error_codes import FETCH_SESSION_ID_NOT_FOUND, NONE
from .error_table import DataApi, data_error_code
from .kafka_call import KafkaCall

NO_OFFSET = -1
SESSIONLESS = 0
# Kafka's broker fetch.max.bytes (55 MiB): a client's max_bytes is capped to it, so what one
# connection's fetch holds is bounded whatever the client asks.
FETCH_MAX_BYTES = 55 * 1024 * 1024


def _query(request: Any) -> FetchQuery:
    return FetchQuery(
        [
            FetchPosition(
                topic.topic,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
            )
            for topic in request.topics
            for p in topic.partitions
        ],
        max_bytes=max(1, min(request.max_bytes, FETCH_MAX_BYTES)),
        min_bytes=request.min_bytes,
        max_wait_ms=request.max_wait_ms,
    )


class _PartitionAnswer:
    __slots__ = ("error", "high_watermark", "log_start_offset", "records")

    def __init__(self) -> None:
        self.error = NONE
        self.high_watermark = NO_OFFSET
        self.log_start_offset = NO_OFFSET
        self.records: list[bytes] = []


def _gather(call: KafkaCall, query: FetchQuery) -> dict[tuple[str, int], _PartitionAnswer]:
    """Each partition's answer from the core's fetch (a partition's batches may come in
    several pieces, each of whole batches, in offset order).

    The fetch spans leader nodes, each long-polling on its own: as soon as the pieces come
    to `min_bytes` the fetch is ended (the other nodes' polls cancelled), as Kafka's broker
    answers once the request as a whole has min_bytes, and the partitions not answered yet
    are asked again without waiting, so every partition is in the answer. The core keeps
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
    """Reads the core's fetch into `answers` until it ends, or until it holds min_bytes of
    records (when the fetch may wait); a fetch refused whole answers its error on every
    partition not answered yet. Returns the record bytes read."""
    received_bytes = 0
    enough = max(query.min_bytes, 1)
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
            answer.log_start_offset = piece.log_start_offset
            if piece.records:
                answer.records.append(piece.records)
                received_bytes += len(piece.records)
            if query.max_wait_ms > 0 and received_bytes >= enough:
                break
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


def fetch(call: KafkaCall, request: Any) -> Any:
    response_class = FetchResponse[call.version]
    topic_class = response_class.FetchableTopicResponse
    partition_class = topic_class.PartitionData
    if call.version >= 7 and request.session_id != SESSIONLESS:
        return response_class(
            throttle_time_ms=0,
            error_code=FETCH_SESSION_ID_NOT_FOUND,
            session_id=SESSIONLESS,
            responses=[],
        )
    call.attributes["kafka.topics"] = ",".join(dict.fromkeys(t.topic for t in request.topics[:16]))
    query = _query(request)
    answers = _gather(call, query) if query.positions else {}
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            answer = answers[(topic.topic, p.partition)]
            partitions.append(
                partition_class(
                    partition_index=p.partition,
                    error_code=answer.error,
                    high_watermark=answer.high_watermark,
                    last_stable_offset=answer.high_watermark,
                    log_start_offset=answer.log_start_offset,
                    aborted_transactions=[],
                    preferred_read_replica=-1,
                    records=b"".join(answer.records) if answer.error == NONE else b"",
                )
            )
        topics.append(topic_class(topic=topic.topic, partitions=partitions))
    return response_class(
        throttle_time_ms=call.throttle_time_ms,
        error_code=NONE,
        session_id=SESSIONLESS,
        responses=topics,
    )


def register(table: ApiTable) -> None:
    table.register(FetchRequest, 4, 12, fetch)
