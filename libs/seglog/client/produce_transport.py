"""How the producer's requests reach their leaders. With `produce_transport` "auto" (the
default), each request goes straight to its leader's bulk listener (bulk.md, version 3) under
a produce grant the gateway gave for its topic (Gateway.ProduceGrants): one hop, as a Kafka
producer talks to its partition leaders, instead of client → gateway → leader. The gateway
stays the way in for everything a grant does not cover: acks=0 (nobody waits for an answer,
the gateway's Produce answers at once), a topic the gateway gave no grant for (no cluster
secret, no Write on it, a producer_byte_rate quota on this client: the gateway's Produce then
answers what it answers), a node without a grant or a bulk listener, a node that refused its
grant or cannot be reached before the request was sent, and a transactional request that
begins the transaction in one of its partitions (the node refuses it, nothing written: KIP-890's
verification is the gateway's, with the coordinator; storage/txn_verification.py). "grpc"
sends everything through the gateway.

Grants are asked for per topic, kept until a third of their life is left, and asked for
again; a topic refused is asked about again after NO_GRANT_RETRY_S. A grant a node refuses
(given under ACLs changed since: bulk.md, "Grants and ACL changes") is dropped, its request
goes through the gateway, and a new grant is asked for RETRY_ASK_S later. A gateway that cannot
be asked (down, restarting) stops nothing: the grants held serve until they expire.

A request lost after it was sent fails as a gRPC call cut short does (LEADER_NOT_AVAILABLE,
REQUEST_TIMED_OUT): the node may have written it, and the producer's retry (idempotent by
default) settles it.

`send` answers a future at once, completed with the ProduceResponse, or with the SeglogError
or grpc.RpcError that stood for it, as gRPC's own future is. It is called from the sender
thread alone. A request under a grant held and not due for renewal, with an idle plain-TCP
connection to its leader, is carried by the sender thread itself without blocking
(rpc/produce_selector.py: no hand-off between threads); its future completes in the
sender's `selector.poll`. Anything that may block — a connection to open, a grant to ask
for, TLS, the gateway — runs on kept daemon threads.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

from ..errors import SeglogError
from ..reused_threads import ReusedThreads
from ..rpc.produce_connections import GrantRefused, ProduceConnections, VerificationNeeded
from ..rpc.produce_selector import ProduceSelector
from ..v1 import bulk_pb2, common_pb2
from .gateway import GatewayClient

logger = logging.getLogger(__name__)

NO_GRANT_RETRY_S = 10.0
RETRY_ASK_S = 1.0


@dataclass(frozen=True)
class _NodeGrant:
    bulk_address: str
    grant: bytes
    signature: bytes
    expires_at_ms: int


@dataclass(frozen=True)
class _TopicGrants:
    by_node: dict[int, _NodeGrant]
    # Asked for again from then on: a third of the grants' life before they end; when the
    # gateway refused them, NO_GRANT_RETRY_S later; when it could not be asked, RETRY_ASK_S.
    ask_again_at_ms: int

    def usable(self) -> bool:
        now_ms = _now_ms()
        return any(now_ms < grant.expires_at_ms for grant in self.by_node.values())


class ProduceTransport:
    def __init__(self, client: GatewayClient, *, direct: bool) -> None:
        self.client = client
        self.direct = direct
        security = client.security
        self._connections = ProduceConnections(
            ssl_context=None if security is None else security.ssl_context(),
            traced=True,
            client_grants=True,
        )
        # The sender thread's wait, and the requests it carries itself.
        self.selector = ProduceSelector(self._connections.pool)
        self._plain_tcp = self._connections.pool.ssl_context is None
        # As many as requests in flight, which the sender bounds (max in flight per node).
        self._threads = ReusedThreads("produce-send")
        self._grants: dict[str, _TopicGrants] = {}
        self._grants_lock = threading.Lock()  # one ProduceGrants call at a time
        self.sent_direct = 0  # requests a leader answered over its bulk listener
        self._sent_lock = threading.Lock()

    def send(
        self, node_id: int, topic: str, acks: int, request: bytes, timeout_s: float
    ) -> Future[common_pb2.ProduceResponse]:
        """A future of the leader's ProduceResponse to `request` (its wire bytes)."""
        if not self.direct or acks == 0:
            # gRPC's future answers as a concurrent one does (result, add_done_callback).
            call: Future[common_pb2.ProduceResponse] = self.client.produce_raw.future(
                request, timeout=timeout_s
            )
            return call
        if self._plain_tcp:
            carried = self._send_here(node_id, topic, request, timeout_s)
            if carried is not None:
                return carried
        return self._threads.submit(self._send, node_id, topic, request, timeout_s)

    def close(self) -> None:
        """After the sender stopped: nothing is in flight; idle threads end by themselves."""
        self.selector.close()
        self._connections.close()

    def _send_here(
        self, node_id: int, topic: str, request: bytes, timeout_s: float
    ) -> Future[common_pb2.ProduceResponse] | None:
        """The request carried by the selector, when nothing about it blocks: a grant held
        and not due for renewal, an idle connection to the node. None: it takes a thread."""
        grant = self._grant(topic, node_id, renew=False)
        if grant is None or not grant.bulk_address:
            return None
        taken = self._connections.pool.take_idle(node_id, grant.bulk_address)
        if taken is None:
            return None
        node, connection = taken
        future: Future[common_pb2.ProduceResponse] = Future()
        deadline_s = time.monotonic() + timeout_s

        def done(answer: bulk_pb2.BulkProduceAnswer | None, error: SeglogError | None) -> None:
            if answer is None:
                future.set_exception(error or SeglogError("a produce ended without an answer"))
                return
            try:
                response = self._connections.settle(node, answer)
            except GrantRefused as exc:
                self._grant_refused(topic, exc)
                self._through_gateway(request, deadline_s - time.monotonic(), future)
                return
            except VerificationNeeded:
                self._through_gateway(request, deadline_s - time.monotonic(), future)
                return
            except SeglogError as exc:
                future.set_exception(exc)
                return
            if response is None:  # the node refused the bulk path, nothing written
                self._through_gateway(request, deadline_s - time.monotonic(), future)
                return
            self._count_direct()
            future.set_result(common_pb2.ProduceResponse.FromString(response))

        frame = connection.produce_frame(grant.grant, grant.signature, request, node_id=node_id)
        self.selector.start(node, connection, frame, len(request), timeout_s, done)
        return future

    def _through_gateway(
        self, request: bytes, timeout_s: float, future: Future[common_pb2.ProduceResponse]
    ) -> None:
        """`future` completed by the gateway's Produce of `request`."""
        call = self.client.produce_raw.future(request, timeout=max(timeout_s, 0.001))

        def answered(_: object) -> None:
            error = call.exception()
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(call.result())

        call.add_done_callback(answered)

    def _count_direct(self) -> None:
        with self._sent_lock:
            self.sent_direct += 1

    def _send(
        self, node_id: int, topic: str, request: bytes, timeout_s: float
    ) -> common_pb2.ProduceResponse:
        grant = self._grant(topic, node_id)
        if grant is not None:
            try:
                answer = self._connections.send(
                    node_id,
                    grant.bulk_address,
                    (grant.grant, grant.signature),
                    request,
                    timeout_s,
                )
            except GrantRefused as exc:
                self._grant_refused(topic, exc)
                answer = None
            except VerificationNeeded:
                answer = None  # the gateway verifies the transaction's new partitions
            if answer is not None:
                self._count_direct()
                parsed: common_pb2.ProduceResponse = common_pb2.ProduceResponse.FromString(answer)
                return parsed
        response: common_pb2.ProduceResponse = self.client.produce_raw(request, timeout=timeout_s)
        return response

    def _grant_refused(self, topic: str, refusal: GrantRefused) -> None:
        """A node refused the topic's grant (the ACLs changed since it was given): the
        gateway is asked again RETRY_ASK_S from now (not at every request), and takes the
        topic's requests meanwhile; the node is not left alone."""
        logger.info("produce grant for %r refused, asking for a new one: %s", topic, refusal)
        self._grants[topic] = _TopicGrants({}, _now_ms() + int(RETRY_ASK_S * 1000))

    def _grant(self, topic: str, node_id: int, *, renew: bool = True) -> _NodeGrant | None:
        """The node's grant for `topic`, asked for when there is none yet or it is time to
        renew; None: the request goes through the gateway (or, without `renew`, which never
        blocks, takes a thread that may ask)."""
        held = self._grants.get(topic)
        grants = held if held is not None and _now_ms() < held.ask_again_at_ms else None
        if grants is None:
            if not renew:
                return None
            grants = self._renew(topic, held)
        grant = grants.by_node.get(node_id)
        return grant if grant is not None and _now_ms() < grant.expires_at_ms else None

    def _renew(self, topic: str, held: _TopicGrants | None) -> _TopicGrants:
        """One thread asks the gateway at a time. The others meanwhile send under the grants
        held while they are still good (a slow or restarting gateway stops no produce that
        a grant covers), or wait for the answer when there are none."""
        if held is not None and held.usable():  # judged once: the lock is taken once
            if not self._grants_lock.acquire(blocking=False):
                return held
        else:
            self._grants_lock.acquire()
        try:
            current = self._grants.get(topic)
            if current is not None and _now_ms() < current.ask_again_at_ms:
                return current  # another thread asked meanwhile
            grants = self._grants[topic] = self._ask(topic, current)
            return grants
        finally:
            self._grants_lock.release()

    def _ask(self, topic: str, held: _TopicGrants | None) -> _TopicGrants:
        """The topic's grants from the gateway. None when it refuses them: the records then
        go through its Produce, which answers what it answers (an authorization error,
        ...). When it cannot be asked (down, restarting), what is held is kept until it
        expires and the gateway is asked again after RETRY_ASK_S."""
        asked_ms = _now_ms()
        try:
            response = self.client.call(
                "ProduceGrants", bulk_pb2.ProduceGrantsRequest(topics=[topic])
            )
        except SeglogError as exc:
            logger.debug("ProduceGrants for %r failed: %s", topic, exc)
            if exc.retriable and held is not None:
                return _TopicGrants(held.by_node, asked_ms + int(RETRY_ASK_S * 1000))
            return _TopicGrants({}, asked_ms + int(NO_GRANT_RETRY_S * 1000))
        assert isinstance(response, bulk_pb2.ProduceGrantsResponse)
        if response.errors or not response.grants:
            for error in response.errors:
                logger.debug("no produce grant for %r: %s", topic, error.error_message)
            return _TopicGrants({}, asked_ms + int(NO_GRANT_RETRY_S * 1000))
        by_node = {
            g.node_id: _NodeGrant(g.bulk_address, g.grant, g.signature, g.expires_at_ms)
            for g in response.grants
        }
        first_end_ms = min(g.expires_at_ms for g in by_node.values())
        return _TopicGrants(by_node, first_end_ms - max(first_end_ms - asked_ms, 0) // 3)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
