"""The broker core's calls that the gRPC API makes in the node-facing wire format, for a
`Caller`: Produce and Fetch relayed as their own bytes (the gateway forwards a produce
unparsed and a fetch's answer as the nodes send it), SplitPoints, and the bulk path's grants.
The gRPC GatewayService (service.py) is an adapter over `RelayedCalls`; the Kafka listener's
way in is data_plane.py, over the same routing.

Who may call, Kafka's rules, checked here on the caller before any work and refused whole
(the gRPC API's contract): Write on the topic to produce or get a produce grant, Read on each
topic to fetch or get a fetch grant, Describe on each topic for split points. A grant carries
the offset of the ACLs its checks were made under, read before them, so it is never newer
than the ACLs they used (bulk.md, "Grants and ACL changes").

A Produce's transactional batches are verified with the transaction coordinator (KIP-890,
transactions/batch_verification.py) before a byte is forwarded: a partition not in the
producer's transaction, or a fenced epoch, refuses the request whole; a request without
transactional batches asks nothing of any coordinator.

A request whose bytes cannot be read is refused with INVALID_REQUEST: nothing in it can be
authorized. Client quotas hold a caller's answers back (quotas.py); a caller with a byte-rate
quota gets no grant, so it goes through the gateway, which meters it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Protocol

from google.protobuf.message import DecodeError

from seglog.errors import InvalidRequestError, SeglogError
from seglog.rpc import check_entries, wire
from seglog.v1 import bulk_pb2, common_pb2

from ..authorization import Authorization, Need
from ..broker.caller import Caller
from ..cluster.registry import Registry
from .call_scope import CallScope
from .fetch_answers import wires
from .fetch_grants import fetch_grants
from .fetch_routing import FetchRouting
from .leader_queries import LeaderQueries
from .leader_routing import LeaderRouting
from .produce_grants import produce_grants
from .produce_routing import ProduceRouting
from .quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, ClientQuotas, quota_user


class ProduceCheck(Protocol):
    def check(self, caller: Caller, request: wire.ScannedProduce) -> None: ...


def _topics(operation: str, names: Iterable[str]) -> list[Need]:
    return [(operation, "topic", name) for name in sorted(set(names))]


class RelayedCalls:
    def __init__(
        self,
        registry: Registry,
        leaders: LeaderRouting,
        producing: ProduceRouting,
        fetching: FetchRouting,
        queries: LeaderQueries,
        quotas: Callable[[], ClientQuotas | None],
        authorization: Authorization,
        record: Callable[[str, float], None],
        *,
        cluster_secret: bytes | None,
        grant_ttl_ms: int,
    ) -> None:
        """`record(api, started)`: a request's duration in the gateway's request metrics."""
        self.registry = registry
        self.leaders = leaders
        self.producing = producing
        self.fetching = fetching
        self.queries = queries
        self.quotas = quotas
        self.authorization = authorization
        self.record = record
        self.cluster_secret = cluster_secret
        self.grant_ttl_ms = grant_ttl_ms
        # KIP-890's verification of transactional batches, set by the gateway once its
        # transaction coordinator is built (transactions/batch_verification.py).
        self.transactions: ProduceCheck | None = None

    # -- Produce and Fetch, as wire bytes ----------------------------------------------------

    def produce(self, caller: Caller, raw: bytes, scope: CallScope) -> bytes:
        """A ProduceRequest's bytes routed to its partitions' leaders; the ProduceResponse's
        bytes (SeglogError raised for a request refused whole)."""
        started = time.perf_counter()
        try:
            try:
                topic = wire.produce_topic(raw)
            except ValueError as exc:
                raise InvalidRequestError(f"malformed Produce request: {exc}") from None
            self.authorization.check(caller, _topics("Write", [topic]), "Produce")
            verification = self.transactions
            check = None if verification is None else partial(verification.check, caller)
            (answer,) = self.producing.produce_all([raw], check)
            if isinstance(answer, SeglogError):
                raise answer
            quotas = self.quotas()
            if quotas is not None:
                answer = quotas.hold_produce_of(
                    quota_user(caller.principal), caller.client_id or "", scope, len(raw), answer
                )
            return answer
        finally:
            self.record("Produce", started)

    def fetch(self, caller: Caller, raw: bytes, scope: CallScope) -> Iterator[bytes]:
        """A FetchRequest's answer: FetchResponse messages as the leaders send them, within
        its limits (fetch_budget.py); SeglogError at once for a request refused whole. The
        nodes' calls end with `scope`, or when the messages are closed."""
        started = time.perf_counter()
        try:
            request = common_pb2.FetchRequest.FromString(raw)
        except DecodeError as exc:
            self.record("Fetch", started)
            raise InvalidRequestError(f"malformed Fetch request: {exc}") from None
        try:
            topics = [p.topic for p in request.partitions]
            self.authorization.check(caller, _topics("Read", topics), "Fetch")
            messages = wires(self.fetching.fetch_messages(request, scope, raw))
        except SeglogError:
            self.record("Fetch", started)
            raise
        quotas = self.quotas()
        if quotas is not None:
            user = quota_user(caller.principal)
            messages = quotas.hold_fetch_of(user, caller.client_id or "", scope, messages)
        return self._recorded(messages, started)

    def _recorded(self, messages: Iterator[bytes], started: float) -> Iterator[bytes]:
        try:
            yield from messages
        finally:
            close = getattr(messages, "close", None)
            if close is not None:
                close()
            self.record("Fetch", started)

    # -- SplitPoints ---------------------------------------------------------------------------

    def split_points(
        self, caller: Caller, request: common_pb2.SplitPointsRequest
    ) -> list[common_pb2.SplitPointsResult]:
        """Each partition's split points, asked of its leader, in request order."""
        check_entries(len(request.partitions), "SplitPoints partitions")
        topics = [p.topic for p in request.partitions]
        self.authorization.check(caller, _topics("Describe", topics), "SplitPoints")
        return self.queries.split_points(request.partitions)

    # -- the bulk path's grants -------------------------------------------------------------

    def fetch_grants(
        self, caller: Caller, request: bulk_pb2.FetchGrantsRequest
    ) -> bulk_pb2.FetchGrantsResponse:
        acls_offset = self.authorization.acls_offset  # before the checks: never newer
        topics = [p.topic for p in request.partitions]
        self.authorization.check(caller, _topics("Read", topics), "FetchGrants")
        if self._metered(caller, CONSUMER_BYTE_RATE):
            return ClientQuotas.refuse_grants(request)
        return fetch_grants(
            request,
            lambda topic, partition, epoch: self.leaders.route(topic, partition, epoch)[0],
            self.cluster_secret,
            self.grant_ttl_ms,
            acls_offset,
        )

    def produce_grants(
        self, caller: Caller, request: bulk_pb2.ProduceGrantsRequest
    ) -> bulk_pb2.ProduceGrantsResponse:
        acls_offset = self.authorization.acls_offset  # before the checks: never newer
        self.authorization.check(caller, _topics("Write", request.topics), "ProduceGrants")
        if self._metered(caller, PRODUCER_BYTE_RATE):
            return ClientQuotas.refuse_produce_grants(request)
        return produce_grants(
            request,
            self.registry.topic,
            self.registry.bulk_routes,
            self.cluster_secret,
            self.grant_ttl_ms,
            acls_offset,
        )

    def _metered(self, caller: Caller, key: str) -> bool:
        quotas = self.quotas()
        return quotas is not None and quotas.metered_of(
            key, quota_user(caller.principal), caller.client_id or ""
        )
