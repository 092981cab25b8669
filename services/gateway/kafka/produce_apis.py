"""Produce 3–13 over the broker core's data plane (routing/data_plane.py: the gRPC path's
routing, checks and semantics, ACLs checked on the caller): the record batches go on as the
producer's bytes, never decoded here.

Every topic's leaders are written at once by the core; a topic refused as a whole (not
authorized, unknown, internal) answers that error on each of its partitions, the other topics
are written, as Kafka's broker answers per partition. acks=0 answers nothing.

The versions (Kafka's ProduceRequest.json), and why each is served:
- 3–9 as before; 9 is the first flexible one.
- 10 (KIP-951): the request is v9's; the answer carries, for a partition answered
  NOT_LEADER_OR_FOLLOWER, its current leader and that leader's endpoint (leader_hints.py).
- 11 (KIP-890): a client asking it handles TRANSACTION_ABORTABLE. seglog never answers it,
  so 11 means what 10 means here.
- 12 (KIP-890 part 2): a transactional produce at 12 adds its partitions to the transaction
  by itself when the cluster's `transaction.version` is 2. seglog finalizes no
  transaction.version (broker/features.py), so clients add partitions with
  AddPartitionsToTxn first, and 12 is 11 here.
- 13 (KIP-516): topics named by id. An id no topic has (a deleted topic's, the zero id)
  answers UNKNOWN_TOPIC_ID on its partitions, which the Java producer retries after a
  metadata refresh; the answer names topics by id too.

Transactional produce (produce_verification.py): a request with transactional batches needs
a transactional id the caller may Write, else it is refused whole with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka's broker answers
(KafkaApis.handleProduceRequest). Each partition whose batch is transactional is written only
when the transaction coordinator has it in that producer's ongoing transaction at that epoch
(KIP-890's verification, so no transaction is left hanging on a partition it never added);
otherwise that partition answers as Kafka's broker does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from seglog.errors import SeglogError

from ..routing.data_plane import PartitionRecords, ProducedPartition, TopicProduce
from . import produce_coalescing as coalescing
from .api_table import ApiTable
from .data_call_end import call_scope
from .error_codes import NONE, UNKNOWN_TOPIC_ID, kafka_error_code
from .error_table import NOT_LEADER_OR_FOLLOWER, DataApi, data_error_code
from .kafka_call import KafkaCall
from .lane_leaders import misdirected
from .leader_hints import LeaderHints
from .produce_verification import TransactionalIdRefusedError, verify_transactional
from .topic_ids import from_wire

NO_OFFSET = -1
MAX_VERSION = 13
FIRST_LEADER_HINT_VERSION = 10  # KIP-951's tagged fields
FIRST_BY_ID_VERSION = 13  # topics named by id (KIP-516)

Results = dict[tuple[str, int], ProducedPartition]


def _refuse(topics: list[TopicProduce], error: SeglogError) -> Results:
    return {
        (t.topic, p.partition): ProducedPartition(p.partition, error)
        for t in topics
        for p in t.partitions
    }


def _without(
    topics: list[TopicProduce], refused: Mapping[tuple[str, int], object]
) -> list[TopicProduce]:
    """`topics` less the partitions `refused` names (and the topics left with none)."""
    if not refused:
        return topics
    kept = [
        TopicProduce(
            t.topic,
            t.acks,
            timeout_ms=t.timeout_ms,
            partitions=[p for p in t.partitions if (t.topic, p.partition) not in refused],
        )
        for t in topics
    ]
    return [t for t in kept if t.partitions]


def _produce(call: KafkaCall, request: Any, topics: list[TopicProduce]) -> Results:
    """Each partition's result of the core's produce of `topics`."""
    # A Kafka broker answers for the partitions it leads only (lane_leaders.py).
    core, asked = call.core, topics
    lane = call.identity.lane
    refused = misdirected(core.registry, core.authorization, call.caller, lane, topics)
    topics = _without(topics, refused)
    if not topics:
        return {tp: ProducedPartition(tp[1], error) for tp, error in refused.items()}
    try:
        refused.update(verify_transactional(call, request, topics))
    except TransactionalIdRefusedError as exc:
        return _refuse(asked, exc)  # the whole request, as Kafka refuses it first
    results: Results = {tp: ProducedPartition(tp[1], error) for tp, error in refused.items()}
    topics = _without(topics, refused)
    if not topics:
        return results
    scope = call_scope(call)
    try:
        answers = call.core.data_plane.produce(call.caller, topics, scope)
    finally:
        scope.finish()
    results.update(
        {
            (topic.topic, result.partition): result
            for topic, results_of in zip(topics, answers, strict=True)
            for result in results_of
        }
    )
    return results


def name_topics(call: KafkaCall, request: Any) -> None:
    """From v13 on, each topic's name from its id, set on the decoded request so that the
    rest (coalescing included) reads names as for earlier versions; "" for an id no topic
    has, whose partitions `_response` answers UNKNOWN_TOPIC_ID."""
    if call.version < FIRST_BY_ID_VERSION:
        return
    registry = call.core.registry
    for topic in request.topic_data:
        try:
            topic.name = registry.topic_name_of(from_wire(topic.topic_id))
        except SeglogError:
            topic.name = ""


def _topics_of(request: Any, by_id: bool) -> list[TopicProduce]:
    return [
        TopicProduce(
            topic.name,
            request.acks,
            timeout_ms=request.timeout_ms,
            partitions=[
                PartitionRecords(data.index, (data.records or b"",))
                for data in topic.partition_data
            ],
        )
        for topic in request.topic_data
        if topic.name or not by_id
    ]


def _error_code(error: SeglogError) -> int:
    if isinstance(error, TransactionalIdRefusedError):
        return kafka_error_code(error, "transactional_id")
    return data_error_code(DataApi.PRODUCE, error)


def _response(call: KafkaCall, request: Any, results: Results) -> Any:
    """The ProduceResponse of `request` from the core's per-partition results."""
    response_class = ProduceResponse[call.version]
    topic_class = response_class.TopicProduceResponse
    partition_class = topic_class.PartitionProduceResponse
    by_id = call.version >= FIRST_BY_ID_VERSION
    hints = (
        LeaderHints(call.core, call.listener) if call.version >= FIRST_LEADER_HINT_VERSION else None
    )
    topics = []
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            result = results.get((topic.name, data.index)) if topic.name or not by_id else None
            code = NONE if result is not None and result.error is None else UNKNOWN_TOPIC_ID
            if result is not None and result.error is not None:
                code = _error_code(result.error)
            ok = code == NONE
            partition = partition_class(
                index=data.index,
                error_code=code,
                base_offset=result.base_offset if ok and result else NO_OFFSET,
                log_append_time_ms=result.log_append_time_ms if ok and result else NO_OFFSET,
                log_start_offset=result.log_start_offset if ok and result else NO_OFFSET,
                record_errors=[],
                error_message=_message(result, code),
            )
            if hints is not None and code == NOT_LEADER_OR_FOLLOWER:
                hint = hints.current_leader(topic.name, data.index)
                partition.current_leader = partition_class.LeaderIdAndEpoch(
                    leader_id=hint.leader_id, leader_epoch=hint.leader_epoch
                )
            partitions.append(partition)
        named = {"topic_id": topic.topic_id} if by_id else {"name": topic.name}
        topics.append(topic_class(partition_responses=partitions, **named))
    response = response_class(responses=topics, throttle_time_ms=call.throttle_time_ms)
    if hints is not None:
        response.node_endpoints = [
            response_class.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in hints.endpoints()
        ]
    return response


def _message(result: ProducedPartition | None, code: int) -> str | None:
    if code == NONE:
        return None
    if result is None or result.error is None:
        return "no topic has this topic id"
    return str(result.error)


def produce(call: KafkaCall, request: Any) -> Any:
    name_topics(call, request)
    return _produce_named(call, request)


def _produce_named(call: KafkaCall, request: Any) -> Any:
    call.attributes["kafka.topics"] = ",".join(t.name for t in request.topic_data[:16])
    topics = _topics_of(request, call.version >= FIRST_BY_ID_VERSION)
    # Kafka's broker answers an empty topic array with an empty answer.
    results: Results = _produce(call, request, topics) if topics else {}
    if request.acks == 0:
        return None
    return _response(call, request, results)


def produce_many(calls: list[KafkaCall], requests: list[Any]) -> list[Any]:
    """Queued produce requests of one connection, consecutive mergeable ones as one append
    per partition (produce_coalescing.py); each request's response, in order."""
    for call, request in zip(calls, requests, strict=True):
        name_topics(call, request)
    responses: list[Any] = [None] * len(requests)
    for run in coalescing.runs(requests):
        if len(run) == 1:
            responses[run[0]] = _produce_named(calls[run[0]], requests[run[0]])
            continue
        members = [requests[i] for i in run]
        call = calls[run[0]]
        topics = coalescing.merged_topics(members)
        call.attributes["kafka.topics"] = ",".join(t.topic for t in topics[:16])
        call.attributes["kafka.coalesced_requests"] = str(len(run))
        merged = _produce(call, members[0], topics)
        for i, results in zip(run, coalescing.split_results(members, merged), strict=True):
            responses[i] = _response(calls[i], requests[i], results)
    return responses


def register(table: ApiTable) -> None:
    table.register(ProduceRequest, 3, MAX_VERSION, produce, batch_handler=produce_many)
