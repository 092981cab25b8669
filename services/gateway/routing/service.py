"""The Gateway service's data path over gRPC: Produce, Fetch, SplitPoints, ListOffsets,
DeleteRecords and the bulk path's grants (the admin calls are the control plane's,
cluster/admin_service.py). A thin adapter over the broker core, which authorizes the call's
Caller: Produce, Fetch, SplitPoints and grants in their wire format (relayed_calls.py),
ListOffsets and DeleteRecords typed, as the Kafka listener calls them (data_plane.py,
record_deletion.py), over the same routing (produce_routing.py, fetch_routing.py,
leader_routing.py). Here the call's Caller is named, its bytes or protobuf go in, and its
SeglogErrors become gRPC statuses.

Failures: an unknown topic or partition fails the call with NOT_FOUND; a stale leader epoch
with FAILED_PRECONDITION (NOT_LEADER_OR_FOLLOWER); a leader on a node that is down with
UNAVAILABLE (LEADER_NOT_AVAILABLE, retriable). In a fetch, those become per-partition error
messages, so one bad partition does not hide its neighbours' data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc

from seglog.errors import (
    PermissionDeniedError,
    SeglogError,
)
from seglog.metrics import RequestMetrics
from seglog.rpc import (
    client_leader_epoch,
    grants,
)
from seglog.rpc.status import abort, error_code_for
from seglog.v1 import bulk_pb2, common_pb2
from services.wait_slots import DEFAULT_MAX_WAITING_CALLS, WaitSlots

from ..authorization import Authorization
from ..broker.caller import Caller
from ..cluster.registry import Registry
from ..node_connections import NodeConnections
from .data_plane import DataPlane, ListedOffset, OffsetQuery
from .fetch_relay import FetchRelay
from .fetch_routing import FetchRouting
from .leader_appends import LeaderAppends
from .leader_queries import LeaderQueries
from .leader_routing import LeaderRouting
from .produce_relay import ProduceRelay
from .produce_routing import ProduceRouting
from .quotas import ClientQuotas
from .record_deletion import RecordDeletion, RecordsBefore, RecordsDeleted
from .relayed_calls import RelayedCalls

logger = logging.getLogger(__name__)

# How much longer than a produce's timeout_ms the gateway waits for the node's answer.
NODE_ANSWER_GRACE_S = 2.0

DEFAULT_TIMEOUT_MS = 30_000
# acks=0 payloads the gateway holds while their nodes have not answered (a hung leader).
DEFAULT_MAX_UNACKNOWLEDGED_BYTES = 256 * 1024 * 1024


class GatewayService:
    def __init__(
        self,
        registry: Registry,
        connections: NodeConnections,
        *,
        max_waiting_fetches: int = DEFAULT_MAX_WAITING_CALLS,
        max_unacknowledged_bytes: int = DEFAULT_MAX_UNACKNOWLEDGED_BYTES,
        cluster_secret: bytes | None = None,
        fetch_grant_ttl_ms: int = grants.DEFAULT_GRANT_TTL_MS,
        produce_relay: ProduceRelay | None = None,
        fetch_relay: FetchRelay | None = None,
        authorization: Authorization,
    ) -> None:
        self.registry = registry
        self.authorization = authorization
        self.leaders = LeaderRouting(registry, connections)
        # Produce to a leader over its bulk listener (produce_relay.py); gRPC without it.
        self.appends = LeaderAppends(produce_relay, self.leaders.node_failure)
        self.cluster_secret = cluster_secret
        self.fetch_grant_ttl_ms = fetch_grant_ttl_ms
        self.connections = connections
        # Produce routed by leader, several topics' parts at once (produce_routing.py).
        self.producing = ProduceRouting(self.leaders.target, self.appends, max_unacknowledged_bytes)
        # Fetch likewise, its long polls bounded (fetch_routing.py).
        self.fetch_relay = fetch_relay
        self.waiting_fetches = WaitSlots(max_waiting_fetches)
        self.fetching = FetchRouting(self.leaders, fetch_relay, self.waiting_fetches)
        self.metrics = RequestMetrics(None, "seglog.gateway")  # the gateway sets its own
        self.quotas: ClientQuotas | None = None  # client quotas (quotas.py), set by the gateway
        # ListOffsets and SplitPoints: asked of each partition's leader (leader_queries.py).
        self.queries = LeaderQueries(
            lambda p: self.leaders.target(p.topic, p.partition, client_leader_epoch(p)),
            self.leaders.node_failure,
        )
        # The broker core's typed data plane over this routing: ListOffsets here, and the
        # Kafka listener's way in.
        self.data_plane = DataPlane(
            self.producing,
            self.fetching,
            self.queries,
            lambda: self.quotas,
            authorization,
            lambda api, started: self.metrics.request(api, started),
        )
        self.record_deletion = RecordDeletion(self.queries, authorization)
        # Produce, Fetch, SplitPoints and grants in the wire format this API takes.
        self.relayed = RelayedCalls(
            registry,
            self.leaders,
            self.producing,
            self.fetching,
            self.queries,
            lambda: self.quotas,
            authorization,
            lambda api, started: self.metrics.request(api, started),
            cluster_secret=cluster_secret,
            grant_ttl_ms=fetch_grant_ttl_ms,
        )

    def close(self) -> None:
        """After the server stopped: the relays' connections and threads."""
        self.appends.close()
        if self.fetch_relay is not None:
            self.fetch_relay.close()

    def _caller(self, context: grpc.ServicerContext) -> Caller:
        try:
            return self.authorization.caller_of(context)
        except SeglogError as exc:
            abort(context, exc)

    # -- FetchGrants and ProduceGrants (the bulk path) ------------------------------------

    def FetchGrants(
        self, request: bulk_pb2.FetchGrantsRequest, context: grpc.ServicerContext
    ) -> bulk_pb2.FetchGrantsResponse:
        try:
            return self.relayed.fetch_grants(self._caller(context), request)
        except SeglogError as exc:
            abort(context, exc)

    def ProduceGrants(
        self, request: bulk_pb2.ProduceGrantsRequest, context: grpc.ServicerContext
    ) -> bulk_pb2.ProduceGrantsResponse:
        try:
            return self.relayed.produce_grants(self._caller(context), request)
        except SeglogError as exc:
            abort(context, exc)

    # -- Produce, Fetch and SplitPoints ---------------------------------------------------

    def Produce(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            return self.relayed.produce(self._caller(context), raw, context)
        except SeglogError as exc:
            abort(context, exc)

    def Fetch(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            answers = self.relayed.fetch(self._caller(context), raw, context)
        except SeglogError as exc:
            abort(context, exc)
        yield from answers

    def SplitPoints(
        self, request: common_pb2.SplitPointsRequest, context: grpc.ServicerContext
    ) -> common_pb2.SplitPointsResponse:
        try:
            found = self.relayed.split_points(self._caller(context), request)
        except SeglogError as exc:
            abort(context, exc)
        response = common_pb2.SplitPointsResponse()
        response.partitions.extend(found)
        return response

    # -- ListOffsets and DeleteRecords (the core's) ---------------------------------------

    def ListOffsets(
        self, request: common_pb2.ListOffsetsRequest, context: grpc.ServicerContext
    ) -> common_pb2.ListOffsetsResponse:
        queries = [
            OffsetQuery(p.topic, p.partition, p.timestamp, client_leader_epoch(p))
            for p in request.partitions
        ]
        try:
            caller = self.authorization.caller_of(context)
            listed = self.data_plane.list_offsets(caller, queries)
        except SeglogError as exc:
            abort(context, exc)
        _refuse_whole(context, [r.error for r in listed])
        response = common_pb2.ListOffsetsResponse()
        response.partitions.extend(_listed_offset(r) for r in listed)
        return response

    def DeleteRecords(
        self, request: common_pb2.DeleteRecordsRequest, context: grpc.ServicerContext
    ) -> common_pb2.DeleteRecordsResponse:
        wanted = [
            RecordsBefore(p.topic, p.partition, p.offset, client_leader_epoch(p))
            for p in request.partitions
        ]
        try:
            caller = self.authorization.caller_of(context)
            deleted = self.record_deletion.delete_records(caller, wanted)
        except SeglogError as exc:
            abort(context, exc)
        response = common_pb2.DeleteRecordsResponse()
        response.partitions.extend(_records_deleted(d) for d in deleted)
        return response


def _refuse_whole(context: grpc.ServicerContext, errors: list[SeglogError | None]) -> None:
    """The gRPC API's contract: a call naming a topic the caller may not use is refused whole
    with PERMISSION_DENIED (the core answers such a topic's partitions alone, as Kafka)."""
    for error in errors:
        if isinstance(error, PermissionDeniedError):
            abort(context, error)


def _listed_offset(r: ListedOffset) -> common_pb2.ListOffsetsResult:
    if r.error is not None:
        return common_pb2.ListOffsetsResult(
            topic=r.topic,
            partition=r.partition,
            error=error_code_for(r.error),
            error_message=str(r.error),
            offset=-1,
            timestamp=-1,
        )
    return common_pb2.ListOffsetsResult(
        topic=r.topic,
        partition=r.partition,
        offset=r.offset,
        timestamp=r.timestamp,
        leader_epoch=r.leader_epoch,
    )


def _records_deleted(d: RecordsDeleted) -> common_pb2.DeleteRecordsResult:
    result = common_pb2.DeleteRecordsResult(
        topic=d.topic, partition=d.partition, low_watermark=d.low_watermark
    )
    if d.error is not None:
        result.error = error_code_for(d.error)
        result.error_message = str(d.error)
    return result
