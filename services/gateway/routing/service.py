"""The Gateway service's data path: Produce and Fetch (ListOffsets and SplitPoints are in
leader_queries.py; the admin calls are the control plane's, cluster/admin_service.py).

Routing reads only topic and partition: Produce's raw request bytes are forwarded unchanged
when all its partitions live on one node (the usual case for a producer grouping by leader).
A request spanning nodes is first checked whole here for what no node's configs change
(`check_relayed_records`: every entry framed, batch headers and CRCs, uncompressed records
sections walked; no record is decoded), so that a malformed part fails the whole request
before any node writes its own part; size limits, timestamps, keys on compacted topics and
compressed contents are left to each node to judge by its own configs, as Kafka's broker
does. It is then split and sent concurrently, and the per-partition results merged in
request order. Fetch streams are relayed as wire bytes; each relayed fetch carries the leader
epoch it was routed by, so a node with another view answers NOT_LEADER instead of judging
the offset against its own log.

Failures: an unknown topic or partition fails the call with NOT_FOUND; a stale leader epoch
with FAILED_PRECONDITION (NOT_LEADER_OR_FOLLOWER); a leader on a node that is down with
UNAVAILABLE (LEADER_NOT_AVAILABLE, retriable). In a fetch, those become per-partition error
messages, so one bad partition does not hide its neighbours' data.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import grpc
from google.protobuf.message import DecodeError

from seglog.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    NodeUnavailableError,
    NotLeaderError,
    SeglogError,
)
from seglog.metrics import RequestMetrics
from seglog.rpc import (
    check_fetch_request,
    client_leader_epoch,
    grants,
)
from seglog.rpc.status import abort, error_from_rpc
from seglog.v1 import bulk_pb2, common_pb2
from services.wait_slots import DEFAULT_MAX_WAITING_CALLS, WaitSlots

from ..cluster.registry import Registry, Route
from ..node_connections import NodeConnections
from .call_scope import CallScope
from .fetch_fanout import fetch_across_nodes
from .fetch_grants import fetch_grants
from .fetch_relay import FetchRelay, cancel_with, fetch_error
from .leader_appends import LeaderAppends, Target
from .leader_queries import LeaderQueries
from .produce_grants import produce_grants
from .produce_relay import ProduceRelay
from .produce_routing import ProduceRouting
from .quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, ClientQuotas

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
        grant_acls_offset: Callable[[], int],
    ) -> None:
        self.registry = registry
        self.grant_acls_offset = grant_acls_offset  # stamped on clients' grants (bulk.md)
        # Produce to a leader over its bulk listener (produce_relay.py); gRPC without it.
        self.appends = LeaderAppends(produce_relay, self._node_failure)
        # Consumers' fetches likewise (fetch_relay.py).
        self.fetch_relay = fetch_relay
        self.cluster_secret = cluster_secret
        self.fetch_grant_ttl_ms = fetch_grant_ttl_ms
        self.connections = connections
        self.waiting_fetches = WaitSlots(max_waiting_fetches)
        # Produce routed by leader, several topics' parts at once (produce_routing.py).
        self.producing = ProduceRouting(
            lambda topic, partition, epoch: self._route(topic, partition, epoch)[1],
            self.appends,
            max_unacknowledged_bytes,
        )
        self.metrics = RequestMetrics(None, "seglog.gateway")  # the gateway sets its own
        self.quotas: ClientQuotas | None = None  # client quotas (quotas.py), set by the gateway
        # ListOffsets and SplitPoints: asked of each partition's leader (leader_queries.py).
        self.queries = LeaderQueries(
            lambda p: self._route(p.topic, p.partition, client_leader_epoch(p))[1],
            self._node_failure,
        )

    def close(self) -> None:
        """After the server stopped: the relays' connections and threads."""
        self.appends.close()
        if self.fetch_relay is not None:
            self.fetch_relay.close()

    # -- routing -------------------------------------------------------------------------

    def _route(self, topic: str, partition: int, client_epoch: int) -> tuple[Route, Target]:
        route = self.registry.route(topic, partition)
        if client_epoch >= 0 and client_epoch != route.leader_epoch:
            raise NotLeaderError(
                f"{topic}-{partition}: leader epoch {client_epoch} is stale, the current one "
                f"is {route.leader_epoch}; refresh metadata"
            )
        if not route.live or route.address is None:
            raise LeaderNotAvailableError(
                f"{topic}-{partition}: leader node {route.leader} is not available"
            )
        connection = self.connections.get(route.leader, route.address)
        return route, Target(route.leader, connection, route.bulk_address)

    def _node_failure(self, target: Target, exc: grpc.RpcError) -> SeglogError:
        error = error_from_rpc(exc)
        # The transport's own failure (no seglog reason attached), or CANCELLED: the node's
        # channel was closed under the call (the node re-registered at a new address) or
        # the node stopped mid-call. A node's own answer keeps its reason.
        if isinstance(error, NodeUnavailableError):
            return LeaderNotAvailableError(f"node {target.node_id} unavailable: {error}")
        return error

    # -- FetchGrants and ProduceGrants (the bulk path) ------------------------------------

    def FetchGrants(
        self, request: bulk_pb2.FetchGrantsRequest, context: grpc.ServicerContext
    ) -> bulk_pb2.FetchGrantsResponse:
        if self.quotas is not None and self.quotas.metered(CONSUMER_BYTE_RATE, context):
            return self.quotas.refuse_grants(request)
        return fetch_grants(
            request,
            lambda topic, partition, epoch: self._route(topic, partition, epoch)[0],
            self.cluster_secret,
            self.fetch_grant_ttl_ms,
            self.grant_acls_offset(),
        )

    def ProduceGrants(
        self, request: bulk_pb2.ProduceGrantsRequest, context: grpc.ServicerContext
    ) -> bulk_pb2.ProduceGrantsResponse:
        if self.quotas is not None and self.quotas.metered(PRODUCER_BYTE_RATE, context):
            return self.quotas.refuse_produce_grants(request)
        return produce_grants(
            request,
            self.registry.topic,
            self.registry.bulk_routes,
            self.cluster_secret,
            self.fetch_grant_ttl_ms,
            self.grant_acls_offset(),
        )

    # -- Produce -------------------------------------------------------------------------

    def Produce(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        started = time.perf_counter()
        try:
            (answer,) = self.producing.produce_all([raw])
            if isinstance(answer, SeglogError):
                abort(context, answer)
            if self.quotas is not None:
                answer = self.quotas.hold_produce(context, len(raw), answer)
            return answer
        finally:
            self.metrics.request("Produce", started)

    # -- Fetch ---------------------------------------------------------------------------

    def Fetch(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        started = time.perf_counter()
        try:
            try:
                request = common_pb2.FetchRequest.FromString(raw)
            except DecodeError as exc:
                abort(context, InvalidRequestError(f"malformed FetchRequest: {exc}"))
            try:
                answers = self.fetch_messages(request, context, raw)
            except SeglogError as exc:
                abort(context, exc)
            if self.quotas is not None:
                answers = self.quotas.hold_fetch(context, answers)
            yield from answers
        finally:
            self.metrics.request("Fetch", started)

    def fetch_messages(
        self, request: common_pb2.FetchRequest, scope: CallScope, raw: bytes | None = None
    ) -> Iterator[bytes]:
        """The fetch's messages (FetchResponse wire bytes, each of whole batches) as the
        leaders send them; SeglogError at once for a request refused whole. `raw`: the
        request's own bytes, when the caller has them. The calls to the nodes end when
        `scope` ends, or when the messages are closed."""
        check_fetch_request(request)
        # A relayed long poll holds a gateway thread for as long as the node waits: past the
        # bound, the node is asked to answer at once with what it has.
        if request.max_wait_ms > 0 and not self.waiting_fetches.try_acquire():
            request.max_wait_ms = 0
            return self._fetch(request, request.SerializeToString(), scope)
        if raw is None:
            raw = request.SerializeToString()
        if request.max_wait_ms <= 0:
            return self._fetch(request, raw, scope)
        release = _once(self.waiting_fetches.release)
        scope.add_callback(release)
        return self._released(self._fetch(request, raw, scope), release)

    @staticmethod
    def _released(messages: Iterator[bytes], release: Callable[[], None]) -> Iterator[bytes]:
        try:
            yield from messages
        finally:
            release()

    def _fetch(
        self, request: common_pb2.FetchRequest, raw: bytes, context: CallScope
    ) -> Iterator[bytes]:
        by_node: dict[int, tuple[Target, list[int]]] = {}
        epochs_added = False
        for i, p in enumerate(request.partitions):
            try:
                route, target = self._route(p.topic, p.partition, client_leader_epoch(p))
            except SeglogError as exc:
                yield fetch_error(p.topic, p.partition, exc)
                continue
            if client_leader_epoch(p) < 0:
                # The node answers only while it leads the epoch the fetch was routed by (as a
                # Kafka consumer's fetch carries its leader epoch): a node whose view is older
                # or newer answers NOT_LEADER, which is retried, instead of judging the offset
                # against a log that is not the leader's (OFFSET_OUT_OF_RANGE resets consumers).
                p.current_leader_epoch = route.leader_epoch
                epochs_added = True
            by_node.setdefault(target.node_id, (target, []))[1].append(i)
        if not by_node:
            return
        if epochs_added:
            raw = request.SerializeToString()
        if len(by_node) == 1 and len(next(iter(by_node.values()))[1]) == len(request.partitions):
            target, indexes = next(iter(by_node.values()))
            yield from self._relay(target, raw, request, indexes, context)
            return
        yield from fetch_across_nodes(
            request,
            by_node,
            lambda target, payload, indexes, keep_cancel: self._relay(
                target, payload, request, indexes, context, keep_cancel
            ),
        )

    def _relay(
        self,
        target: Target,
        payload: bytes,
        request: common_pb2.FetchRequest,
        indexes: list[int],
        context: CallScope,
        keep_cancel: Callable[[Callable[[], object]], None] | None = None,
    ) -> Iterator[bytes]:
        timeout_s = request.max_wait_ms / 1000 + DEFAULT_TIMEOUT_MS / 1000
        if self.fetch_relay is not None:
            answered = yield from self.fetch_relay.fetch(
                target, request, payload, indexes, timeout_s, context, keep_cancel
            )
            if answered:
                return
        stream = target.connection.fetch_raw(payload, timeout=timeout_s)
        cancel = getattr(stream, "cancel", None)
        if cancel is not None:  # the traced channel hands back a plain generator
            cancel_with(context, cancel)
            if keep_cancel is not None:
                keep_cancel(cancel)
        try:
            yield from stream
        except grpc.RpcError as exc:
            error = self._node_failure(target, exc)
            for i in indexes:
                p = request.partitions[i]
                yield fetch_error(p.topic, p.partition, error)


def _once(action: Callable[[], None]) -> Callable[[], None]:
    """`action`, run at most once however many times the result is called (a call's end and
    its cancellation callback may both release its slot)."""
    done = threading.Event()
    lock = threading.Lock()

    def run() -> None:
        with lock:
            if done.is_set():
                return
            done.set()
        action()

    return run


def _noop() -> None:
    pass
