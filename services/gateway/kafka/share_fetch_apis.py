"""ShareFetch 1–2 and ShareAcknowledge 1–2 (KIP-932; v2 adds KIP-1222's renew
acknowledgements and KIP-1206's acquire mode) over the share core (share/share_core.py).

Topics go by id; an id no topic has answers UNKNOWN_TOPIC_ID on its partitions. The records
are the stored batches holding acquired records, relayed as the leaders sent them, with the
AcquiredRecords ranges (first, last, delivery count) the client reads them by. A request
refused whole (the group not readable, a session error, an unknown member) answers its code
at the top with no partitions, as Kafka's broker does; a topic not readable answers
TOPIC_AUTHORIZATION_FAILED on its partitions. A renew-only request (IsRenewAck) acquires
nothing new, as Kafka's does.
"""

from __future__ import annotations

from typing import Any

from seglog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    NotCoordinatorError,
    SeglogError,
)

from ..share.partition_ops import AckBatch
from ..share.share_core import PartitionAnswer, PartitionAsk, ShareFetchQuery
from .api_table import ApiTable
from .data_call_end import call_scope
from .error_codes import NONE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID
from .error_table import DataApi, data_error_code
from .kafka_call import KafkaCall
from .share_group_apis import share_error_code
from .share_messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)
from .topic_ids import from_wire, to_wire

MAX_ACK_BATCHES = 100_000  # per request: each names a range; more is not a real client's
NO_LEADER = {"leader_id": -1, "leader_epoch": -1}


def _asks(
    call: KafkaCall, topics: Any
) -> tuple[list[PartitionAsk], dict[str, Any], list[tuple[Any, int]]]:
    """The request's partitions by topic name, the names' wire ids, and the (id, partition)
    of topics no topic has (each answered UNKNOWN_TOPIC_ID)."""
    image = call.core.registry.image
    asks: list[PartitionAsk] = []
    ids: dict[str, Any] = {}
    unknown: list[tuple[Any, int]] = []
    batches = 0
    for topic in topics:
        name = image.topic_name_of(from_wire(topic.topic_id)) if from_wire(topic.topic_id) else ""
        for p in topic.partitions:
            if not name:
                unknown.append((topic.topic_id, p.partition_index))
                continue
            ids[name] = topic.topic_id
            acks = tuple(
                AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                for b in p.acknowledgement_batches
            )
            batches += len(acks)
            if batches > MAX_ACK_BATCHES:
                raise InvalidRequestError(f"more than {MAX_ACK_BATCHES} acknowledgement batches")
            asks.append(PartitionAsk(name, p.partition_index, acks))
    return asks, ids, unknown


def _topic_responses(response_class: Any, topic_class_name: str, answers: list[Any]) -> list[Any]:
    topic_class = getattr(response_class, topic_class_name)
    by_topic: dict[Any, list[Any]] = {}
    for topic_id, partition in answers:
        by_topic.setdefault(topic_id, []).append(partition)
    return [topic_class(topic_id=t, partitions=ps) for t, ps in by_topic.items()]


def _fetch_error_code(error: SeglogError) -> int:
    """A ShareFetch partition's error code. The gateway holding the share partition not
    reachable for now (it died; another takes the partition over) is answered as a leader
    moving: Kafka's share consumer (ShareFetchCollector) refreshes its metadata and fetches
    again on NOT_LEADER_OR_FOLLOWER, and throws IllegalStateException on a coordinator
    error, which it never expects on a partition."""
    if isinstance(
        error, (CoordinatorNotAvailableError, NotCoordinatorError, CoordinatorLoadInProgressError)
    ):
        return NOT_LEADER_OR_FOLLOWER
    # A partition's leader down or moving, as a Fetch answers it: the share consumer throws
    # IllegalStateException on LEADER_NOT_AVAILABLE ("Unexpected error code 5"), seen when a
    # leader's node was SIGKILLed under a share group.
    if data_error_code(DataApi.FETCH, error) == NOT_LEADER_OR_FOLLOWER:
        return NOT_LEADER_OR_FOLLOWER
    return share_error_code(error, "topic")


def _fetch_partition(topic_class: Any, answer: PartitionAnswer) -> Any:
    partition_class = topic_class.PartitionData
    return partition_class(
        partition_index=answer.partition,
        error_code=NONE if answer.error is None else _fetch_error_code(answer.error),
        error_message=None if answer.error is None else str(answer.error),
        acknowledge_error_code=NONE
        if answer.ack_error is None
        else share_error_code(answer.ack_error, "topic"),
        acknowledge_error_message=None if answer.ack_error is None else str(answer.ack_error),
        current_leader=partition_class.LeaderIdAndEpoch(**NO_LEADER),
        records=answer.records,
        acquired_records=[
            partition_class.AcquiredRecords(
                first_offset=r.first_offset,
                last_offset=r.last_offset,
                delivery_count=r.delivery_count,
            )
            for r in answer.acquired
        ],
    )


def share_fetch(call: KafkaCall, request: Any) -> Any:
    response_class = ShareFetchResponse[call.version]
    topic_class = response_class.ShareFetchableTopicResponse

    def refused(exc: SeglogError) -> Any:
        return response_class(
            throttle_time_ms=0,
            error_code=share_error_code(exc),
            error_message=str(exc),
            acquisition_lock_timeout_ms=0,
            responses=[],
            node_endpoints=[],
        )

    scope = call_scope(call)
    try:
        asks, ids, unknown = _asks(call, request.topics)
        image = call.core.registry.image
        forgotten = [
            (image.topic_name_of(from_wire(t.topic_id)), p)
            for t in request.forgotten_topics_data
            for p in t.partitions
        ]
        renew_only = call.version >= 2 and bool(request.is_renew_ack)
        answer = call.core.share.fetch(
            call.caller,
            ShareFetchQuery(
                group_id=request.group_id or "",
                member_id=request.member_id or "",
                session_epoch=request.share_session_epoch,
                max_wait_ms=request.max_wait_ms,
                min_bytes=request.min_bytes,
                max_bytes=request.max_bytes,
                max_records=0 if renew_only else request.max_records,
                partitions=asks,
                forgotten=[f for f in forgotten if f[0]],
            ),
            scope,
        )
    except SeglogError as exc:
        return refused(exc)
    finally:
        scope.finish()
    partitions = [
        (
            ids.get(a.topic) or to_wire(call.core.registry.image.topic_id_of(a.topic)),
            _fetch_partition(topic_class, a),
        )
        for a in answer.partitions
    ]
    partition_class = topic_class.PartitionData
    for topic_id, index in unknown:
        partitions.append(
            (
                topic_id,
                partition_class(
                    partition_index=index,
                    error_code=UNKNOWN_TOPIC_ID,
                    error_message="no topic has this id",
                    acknowledge_error_code=NONE,
                    acknowledge_error_message=None,
                    current_leader=partition_class.LeaderIdAndEpoch(**NO_LEADER),
                    records=b"",
                    acquired_records=[],
                ),
            )
        )
    return response_class(
        # Past the caller's consumer_byte_rate the core muted the connection (KIP-219).
        throttle_time_ms=call.throttle_time_ms,
        error_code=NONE,
        error_message=None,
        acquisition_lock_timeout_ms=answer.acquisition_lock_timeout_ms,
        responses=_topic_responses(response_class, "ShareFetchableTopicResponse", partitions),
        node_endpoints=[],
    )


def share_acknowledge(call: KafkaCall, request: Any) -> Any:
    response_class = ShareAcknowledgeResponse[call.version]
    topic_class = response_class.ShareAcknowledgeTopicResponse
    partition_class = topic_class.PartitionData

    def partition(index: int, error: SeglogError | None, code: int | None = None) -> Any:
        return partition_class(
            partition_index=index,
            error_code=code
            if code is not None
            else (NONE if error is None else share_error_code(error, "topic")),
            error_message=None if error is None else str(error),
            current_leader=partition_class.LeaderIdAndEpoch(**NO_LEADER),
        )

    try:
        asks, ids, unknown = _asks(call, request.topics)
        answer = call.core.share.acknowledge(
            call.caller,
            request.group_id or "",
            request.member_id or "",
            request.share_session_epoch,
            asks,
        )
    except SeglogError as exc:
        return response_class(
            throttle_time_ms=0,
            error_code=share_error_code(exc),
            error_message=str(exc),
            acquisition_lock_timeout_ms=0,
            responses=[],
            node_endpoints=[],
        )
    answers = [(ids[a.topic], partition(a.partition, a.error)) for a in answer.partitions]
    answers += [(topic_id, partition(index, None, UNKNOWN_TOPIC_ID)) for topic_id, index in unknown]
    return response_class(
        throttle_time_ms=0,
        error_code=NONE,
        error_message=None,
        acquisition_lock_timeout_ms=answer.acquisition_lock_timeout_ms,
        responses=_topic_responses(response_class, "ShareAcknowledgeTopicResponse", answers),
        node_endpoints=[],
    )


def register(table: ApiTable) -> None:
    table.register(ShareFetchRequest, 1, 2, share_fetch)
    table.register(ShareAcknowledgeRequest, 1, 2, share_acknowledge)
