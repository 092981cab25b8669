"""The ShareGroups gRPC service (share_groups.proto): seglog's own share consumer's heartbeat,
fetch and acknowledge, an adapter over the same typed share core (share_core.py) the Kafka
port's ShareGroupHeartbeat/ShareFetch/ShareAcknowledge call. Each method names the call's
Caller, builds the core's typed request and encodes its answer; the core authorizes.

A call the caller may not make (its credential, Read on the group) fails whole, as the
GroupCoordinator service's do; the group's and the session's errors are answered in the
response's `error`, a partition's in its entry."""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from seglog.errors import AuthenticationError, PermissionDeniedError, SeglogError
from seglog.rpc import check_entries
from seglog.rpc.status import abort, set_error
from seglog.v1 import share_groups_pb2

from ..authorization import Authorization
from ..broker.caller import Caller
from .partition_ops import AckBatch
from .share_core import PartitionAnswer, PartitionAsk, ShareFetchQuery, ShareGroups
from .share_core import ShareFetchAnswer as CoreFetchAnswer
from .share_membership import ShareHeartbeat

_CALL_ERRORS = (AuthenticationError, PermissionDeniedError)


class ShareGroupsService:
    def __init__(self, core: ShareGroups, authorization: Authorization) -> None:
        self.core = core
        self.authorization = authorization

    def _caller(self, context: grpc.ServicerContext) -> Caller:
        try:
            return self.authorization.caller_of(context)
        except SeglogError as exc:
            abort(context, exc)

    def ShareGroupHeartbeat(
        self, request: share_groups_pb2.ShareHeartbeatRequest, context: grpc.ServicerContext
    ) -> share_groups_pb2.ShareHeartbeatResponse:
        caller = self._caller(context)
        response = share_groups_pb2.ShareHeartbeatResponse()
        beat = ShareHeartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            rack_id=request.rack_id or None,
            subscribed_topics=None
            if request.subscription_unchanged
            else tuple(request.subscribed_topics),
            client_id=request.client_id,
            client_host=context.peer(),
        )
        try:
            answer = self.core.heartbeat(caller, beat)
        except _CALL_ERRORS as exc:
            abort(context, exc)
        except SeglogError as exc:
            set_error(response, exc)
            return response
        response.member_id = answer.member_id
        response.member_epoch = answer.member_epoch
        response.heartbeat_interval_ms = answer.heartbeat_interval_ms
        if answer.assignment is not None:
            response.has_assignment = True
            for topic, partitions in sorted(answer.assignment.items()):
                response.assignment.add(topic=topic, partitions=partitions)
        return response

    def ShareFetch(
        self, request: share_groups_pb2.ShareFetchCall, context: grpc.ServicerContext
    ) -> share_groups_pb2.ShareFetchAnswer:
        caller = self._caller(context)
        response = share_groups_pb2.ShareFetchAnswer()
        try:
            query = ShareFetchQuery(
                group_id=request.group_id,
                member_id=request.member_id,
                session_epoch=request.session_epoch,
                max_wait_ms=request.max_wait_ms,
                min_bytes=request.min_bytes,
                max_bytes=request.max_bytes,
                max_records=request.max_records,
                partitions=_asks(request.partitions),
                forgotten=[(t.topic, p) for t in request.forgotten for p in t.partitions],
            )
            answer = self.core.fetch(caller, query, context)
        except _CALL_ERRORS as exc:
            abort(context, exc)
        except SeglogError as exc:
            set_error(response, exc)
            return response
        _encode(answer, response)
        return response

    def ShareAcknowledge(
        self, request: share_groups_pb2.ShareAcknowledgeCall, context: grpc.ServicerContext
    ) -> share_groups_pb2.ShareFetchAnswer:
        caller = self._caller(context)
        response = share_groups_pb2.ShareFetchAnswer()
        try:
            answer = self.core.acknowledge(
                caller,
                request.group_id,
                request.member_id,
                request.session_epoch,
                _asks(request.partitions),
            )
        except _CALL_ERRORS as exc:
            abort(context, exc)
        except SeglogError as exc:
            set_error(response, exc)
            return response
        _encode(answer, response)
        return response


def _asks(partitions: Iterable[share_groups_pb2.SharePartitionAcks]) -> list[PartitionAsk]:
    """The request's partitions, typed; INVALID_REQUEST (nothing applied) for more entries
    than one request may carry."""
    asks = [
        PartitionAsk(
            p.topic,
            p.partition,
            tuple(AckBatch(b.first_offset, b.last_offset, tuple(b.types)) for b in p.acks),
        )
        for p in partitions
    ]
    check_entries(len(asks), "share partitions")
    check_entries(sum(len(a.acks) for a in asks), "acknowledgement batches")
    return asks


def _encode(answer: CoreFetchAnswer, response: share_groups_pb2.ShareFetchAnswer) -> None:
    response.acquisition_lock_timeout_ms = answer.acquisition_lock_timeout_ms
    for partition in answer.partitions:
        _encode_partition(partition, response.partitions.add())


def _encode_partition(answer: PartitionAnswer, out: share_groups_pb2.SharePartitionAnswer) -> None:
    out.topic = answer.topic
    out.partition = answer.partition
    if answer.error is not None:
        set_error(out, answer.error)
    if answer.ack_error is not None:
        holder = share_groups_pb2.ShareFetchAnswer()  # set_error fills error/error_message
        set_error(holder, answer.ack_error)
        out.ack_error = holder.error
        out.ack_error_message = holder.error_message
    out.records = answer.records
    for r in answer.acquired:
        out.acquired.add(
            first_offset=r.first_offset, last_offset=r.last_offset, delivery_count=r.delivery_count
        )
