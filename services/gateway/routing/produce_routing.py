"""Produce routed to the partitions' leaders: one or several topics' requests (each seglog's
ProduceRequest wire bytes, one topic each), all their leaders' parts sent at once through the
relay's one pool (leader_appends.py), the answers put back per topic in request order.

Routing reads only topic, partitions, epochs, acks and timeout: a topic's request bytes go on
unchanged when one node takes all of it (the usual case for a producer grouping by leader).
A topic spanning nodes is first checked whole here for what no node's configs change
(`check_relayed_records`: every entry framed, batch headers and CRCs, uncompressed records
sections walked; no record is decoded), so that a malformed part fails the whole topic before
any node writes its own part; size limits, timestamps, keys on compacted topics and
compressed contents are left to each node to judge by its own configs, as Kafka's broker
does. It is then split, one sub-request per node written from views of the client's bytes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from seglog.errors import InvalidRequestError, InvalidTopicError, RequestTimedOutError, SeglogError
from seglog.records.checks import check_relayed_records
from seglog.rpc import check_produce_request, client_leader_epoch, wire
from seglog.rpc.status import error_code_for
from seglog.semconv import TOPIC
from seglog.spans import annotate_current_span
from seglog.v1 import common_pb2

from ..cluster.topic_rules import is_internal_topic
from .leader_appends import LeaderAppends, Target

logger = logging.getLogger(__name__)

# How much longer than a produce's timeout_ms the gateway waits for the node's answer.
NODE_ANSWER_GRACE_S = 2.0
DEFAULT_TIMEOUT_MS = 30_000

# route(topic, partition, client leader epoch) -> the leader's Target, or SeglogError.
RouteTarget = Callable[[str, int, int], Target]
RequestCheck = Callable[[wire.ScannedProduce], None]


@dataclass
class _Plan:
    """One topic's request as routed: its parts' indexes (into the whole list of parts sent)
    and each part's request indexes, or the error that answers the whole topic."""

    request: wire.ScannedProduce
    raw: bytes
    by_node: dict[int, tuple[Target, list[int]]]
    parts: list[int]


class ProduceRouting:
    def __init__(
        self, route: RouteTarget, appends: LeaderAppends, max_unacknowledged_bytes: int
    ) -> None:
        self.route = route
        self.appends = appends
        self.max_unacknowledged_bytes = max_unacknowledged_bytes
        self._unacknowledged_bytes = 0  # acks=0 payloads handed to nodes, not yet answered
        self._unacknowledged_lock = threading.Lock()

    def produce_all(
        self, raws: Sequence[bytes], check: RequestCheck | None = None
    ) -> list[bytes | SeglogError]:
        """Each topic request's answer (ProduceResponse wire bytes: the node's own, relayed
        unparsed, when one node took it all), or the SeglogError refusing it whole.
        `check`: the caller's own judgement of each request as scanned, before routing (the
        gRPC Produce's transactional verification); raising refuses it whole."""
        answers: list[bytes | SeglogError | None] = [None] * len(raws)
        plans: dict[int, _Plan] = {}
        parts: list[tuple[Target, bytes]] = []
        timeout_s = 0.0
        for i, raw in enumerate(raws):
            try:
                plan = self._plan(raw, check)
            except SeglogError as exc:
                answers[i] = exc
                continue
            # The node answers REQUEST_TIMED_OUT per partition itself once timeout_ms has
            # passed (acks=all); the relay waits a little longer, so that answer reaches the
            # producer rather than the relay's own deadline racing it.
            topic_timeout_s = (plan.request.timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
            if plan.request.acks == 0:
                try:
                    answers[i] = self._without_acks(plan, topic_timeout_s + NODE_ANSWER_GRACE_S)
                except SeglogError as exc:
                    answers[i] = exc
                continue
            timeout_s = max(timeout_s, topic_timeout_s + NODE_ANSWER_GRACE_S)
            for target, indexes in plan.by_node.values():
                plan.parts.append(len(parts))
                payload = raw if len(plan.by_node) == 1 else _sub_request(plan.request, indexes)
                parts.append((target, payload))
            plans[i] = plan
        relayed = self.appends.append_all(parts, timeout_s) if parts else []
        for i, plan in plans.items():
            if len(plan.parts) == 1:
                answers[i] = relayed[plan.parts[0]]
            else:
                answers[i] = _merged(plan, [relayed[p] for p in plan.parts]).SerializeToString()
        done = [answer for answer in answers if answer is not None]
        assert len(done) == len(raws)  # each topic answered, or refused, above
        return done

    def _plan(self, raw: bytes, check: RequestCheck | None = None) -> _Plan:
        """Everything known here, before anything is sent: acks, topic, partitions, epochs,
        leaders up; the request indexes grouped by leader node."""
        # The records are skipped (not copied): the request's own bytes go on when one node
        # takes it all.
        try:
            request = wire.scan_produce_request(raw)
        except ValueError as exc:
            raise InvalidRequestError(f"malformed ProduceRequest: {exc}") from None
        annotate_current_span({TOPIC: request.topic})
        check_produce_request(request)
        if is_internal_topic(request.topic):
            raise InvalidTopicError(
                f"topic {request.topic!r} is internal: only the cluster itself writes it"
            )
        if check is not None:
            check(request)
        by_node: dict[int, tuple[Target, list[int]]] = {}
        for i, data in enumerate(request.partitions):
            target = self.route(request.topic, data.partition, client_leader_epoch(data))
            by_node.setdefault(target.node_id, (target, []))[1].append(i)
        if len(by_node) > 1:
            # Split across nodes, the request could be half written if one node refused its
            # part for malformed bytes: check here first what no config changes.
            for data in request.partitions:
                try:
                    check_relayed_records(data.records)
                except SeglogError as exc:
                    raise type(exc)(f"{request.topic}-{data.partition}: {exc}") from None
        return _Plan(request, raw, by_node, [])

    def _without_acks(self, plan: _Plan, timeout_s: float) -> bytes:
        """acks=0: hand the batches to the nodes and answer at once (offsets unknown, -1),
        as Kafka does; a node's refusal is only logged. What the nodes have not answered yet
        is held here, so it is bounded (`max_unacknowledged_bytes`): past it the producer is
        told to back off (a retriable REQUEST_TIMED_OUT) instead of the gateway growing."""
        size = len(plan.raw)
        with self._unacknowledged_lock:
            if self._unacknowledged_bytes + size > self.max_unacknowledged_bytes:
                raise RequestTimedOutError(
                    f"{self._unacknowledged_bytes} bytes of acks=0 produce are still "
                    f"unanswered by their nodes (bound {self.max_unacknowledged_bytes}); "
                    f"retry later"
                )
            self._unacknowledged_bytes += size
        remaining_calls = [len(plan.by_node)]

        def settled(call: grpc.Future, node_id: int) -> None:
            if call.exception() is not None:
                logger.warning("acks=0 produce to node %d failed: %s", node_id, call.exception())
            with self._unacknowledged_lock:
                remaining_calls[0] -= 1
                if remaining_calls[0] == 0:
                    self._unacknowledged_bytes -= size

        for node_id, (target, indexes) in plan.by_node.items():
            payload = plan.raw if len(plan.by_node) == 1 else _sub_request(plan.request, indexes)
            call = target.connection.append_raw.future(payload, timeout=timeout_s)
            call.add_done_callback(lambda call, node_id=node_id: settled(call, node_id))
        response = common_pb2.ProduceResponse(topic=plan.request.topic)
        for data in plan.request.partitions:
            response.partitions.add(partition=data.partition, base_offset=-1, last_offset=-1)
        answer: bytes = response.SerializeToString()
        return answer


def _sub_request(request: wire.ScannedProduce, indexes: list[int]) -> bytes:
    """The request's part for one node, its records written from views of the client's
    bytes (one copy, no message parsed)."""
    return wire.encode_produce_request(
        request.topic,
        request.acks,
        request.timeout_ms,
        (
            (
                request.partitions[i].partition,
                client_leader_epoch(request.partitions[i]),
                [request.partitions[i].records],
            )
            for i in indexes
        ),
    )


def _merged(plan: _Plan, answers: list[bytes | SeglogError]) -> common_pb2.ProduceResponse:
    """The nodes' answers to one topic's parts as one answer, in the request's order; a node
    that failed answers its error on each of its partitions."""
    request = plan.request
    results: dict[int, common_pb2.PartitionProduceResult] = {}
    for (_, indexes), answer in zip(plan.by_node.values(), answers, strict=True):
        if not isinstance(answer, SeglogError):
            for result in common_pb2.ProduceResponse.FromString(answer).partitions:
                results[result.partition] = result
            continue
        for index in indexes:
            partition = request.partitions[index].partition
            results[partition] = common_pb2.PartitionProduceResult(
                partition=partition,
                error=error_code_for(answer),
                error_message=str(answer),
                base_offset=-1,
                last_offset=-1,
            )
    response = common_pb2.ProduceResponse(topic=request.topic)
    response.partitions.extend(results[p.partition] for p in request.partitions)
    return response
