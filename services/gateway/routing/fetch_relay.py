"""The gateway's fetch relay over the storage nodes' bulk listeners (bulk.md, "The gateway's
fetch relay"): a consumer's fetch through the gateway (its gRPC Fetch, and the Kafka
listener's, which goes through it) crossed a second gRPC hop to the leader, a server stream
opened per fetch. It goes over kept TCP connections to the leader's bulk listener instead,
as the produce relay's requests do (produce_relay.py), and the leader's chunks are relayed as
pieces holding what the FetchResponse messages the gRPC stream would have carried hold (the
same records, watermarks and errors; the node serves both from the same reads), their records
the buffers they were received into (fetch_answers.py).

The relay signs its own grant per node (`fetch_relay`, no partition: nothing a client is ever
given), and the node holds each partition to the leader epoch the gateway routed it by.

A fetch is read-only, so whatever keeps the bulk path from answering before the first chunk
arrived — no idle connection left, the node unreachable, or refusing the grant (an older
node, another secret) — sends the same fetch over gRPC instead, and a node that refused is
left to gRPC for RETRY_REFUSED_AFTER_S. A long poll holds its connection until the node
answers. One the caller gives up (the client went away, or fetch_fanout.py gave up a silent
node) is cancelled on its connection: the node ends the wait and answers with what it has
(storage_node/peer_watch.py), and the connection goes back to the pool for the next fetch;
a node that cannot answer (paused) loses the connection after CANCEL_GRACE_S
(cancel_deadlines.py).
On TLS, where the reading thread owns the socket, the connection is shut down instead; so
there a fetch spanning several nodes, whose silent nodes are given up every time one
answers, goes over gRPC.
"""

from __future__ import annotations

import functools
import logging
import ssl
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

from seglog.errors import LeaderNotAvailableError, SeglogError
from seglog.rpc import grants
from seglog.rpc.bulk_client import BulkConnection, BulkFetchError, BulkMessage, BulkRefused
from seglog.rpc.bulk_pool import BulkPool, NodePool
from seglog.rpc.status import error_code_for
from seglog.v1 import common_pb2

from .call_scope import CallScope
from .cancel_deadlines import CancelDeadlines
from .fetch_answers import FetchAnswer, FetchPiece
from .leader_appends import Target
from .produce_relay import RelayConfig, configured_relay, relay_settings

logger = logging.getLogger(__name__)

# Connections kept per node, busy or idle: each long poll holds one for its wait, and the
# gateway bounds its waiting fetches (waiting_fetches) anyway; past this, gRPC.
MAX_CONNECTIONS_PER_NODE = 64
RETRY_REFUSED_AFTER_S = 60.0
# An answer its reader left is read to its end, to keep the connection, up to this much; a
# new connection costs less than reading more.
MAX_DRAINED_BYTES = 1024 * 1024
# ... and for so long at most without a byte: a node that does not answer at once (paused,
# overloaded) costs its connection, not the leaving reader's thread for the poll's timeout.
DRAIN_TIMEOUT_S = 1.0
# A cancelled poll's node answers at once; one that has not after this long is given up.
CANCEL_GRACE_S = 1.0


def configured_fetch_relay(config: RelayConfig, *, traced: bool) -> FetchRelay | None:
    """The gateway's fetch relay as configured: none without a cluster secret or with
    `bulk.fetch.relay.enable` false."""
    if config.cluster_secret is None or not config.bulk_fetch_relay_enable:
        return None
    return FetchRelay(**relay_settings(config, traced=traced))


def configured_relays(config: RelayConfig, *, traced: bool) -> dict[str, Any]:
    """GatewayService's `produce_relay` and `fetch_relay`, as configured."""
    return {
        "produce_relay": configured_relay(config, traced=traced),
        "fetch_relay": configured_fetch_relay(config, traced=traced),
    }


def relayable(request: common_pb2.FetchRequest) -> bool:
    """A consumer's sessionless fetch: what the relay's grant covers."""
    return not request.HasField("replica_id") and not request.HasField("session_id")


class RelayedFetch:
    """One fetch on one kept connection: `cancel` (any thread, any time) gives it up."""

    def __init__(self, relay: FetchRelay, node: NodePool, connection: BulkConnection) -> None:
        self._relay = relay
        self._node = node
        self._connection = connection
        # The call's end runs `cancel` too, after the answer was read and the connection
        # went back to the pool, maybe to another fetch: it acts only while this one's
        # request is out and its answer not read.
        self._lock = threading.Lock()
        self._sent = False
        self._done = False
        self._answered = False
        self._cancelled = False

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled or self._done:
                return
            self._cancelled = True
            if not self._sent:
                return  # `answers` sends nothing now
            # The node ends the wait and answers; the reader takes that answer as any. A
            # node that cannot answer (paused) loses the connection after CANCEL_GRACE_S.
            self._connection.cancel()
        self._relay.deadlines.after_grace(self._give_up)

    def _give_up(self) -> None:
        """A cancelled fetch's grace passed: shut its connection down unless its answer
        was read meanwhile (the connection may then carry another fetch)."""
        with self._lock:
            if not self._done:
                self._connection.shutdown()

    @property
    def nothing_read(self) -> bool:
        """Whether the fetch failed before any answer came and without being cancelled:
        then the same fetch may go over gRPC."""
        return not (self._answered or self._cancelled)

    def relay(
        self,
        request: common_pb2.FetchRequest,
        payload: bytes,
        indexes: list[int],
        timeout_s: float,
        on_cancel: list[Callable[[Callable[[], object]], object]],
        still_wanted: Callable[[], bool],
    ) -> Generator[FetchAnswer, None, bool]:
        """Relay the fetch `payload` (the partitions `indexes` of `request`) to the node,
        handing `cancel` to each of `on_cancel`; False when it should go over gRPC instead:
        it failed with nothing read and was not given up (`still_wanted`). Cut off
        mid-answer, or given up, it reads as a gRPC stream broken there: the node's loss for
        each of its partitions."""
        for hand_over in on_cancel:
            hand_over(self.cancel)
        whole = len(indexes) == len(request.partitions)
        try:
            fetch = request if whole else common_pb2.FetchRequest.FromString(payload)
            yield from self.answers(fetch, timeout_s)
            return True
        except BulkFetchError as exc:
            if self.nothing_read and still_wanted():
                return False
            lost = LeaderNotAvailableError(f"node {self._node.node_id} unavailable: {exc}")
            for i in indexes:
                p = request.partitions[i]
                yield fetch_error(p.topic, p.partition, lost)
            return True

    def answers(self, fetch: common_pb2.FetchRequest, timeout_s: float) -> Iterator[FetchPiece]:
        """The node's answer, a piece per chunk. BulkRefused: the node
        refused the relay before answering anything (use gRPC); BulkFetchError: the
        connection failed or was cancelled, possibly after messages were yielded."""
        grant, signature = self._relay.grants.get(self._node.node_id)
        connection = self._connection
        try:
            with self._lock:
                if self._cancelled:
                    raise BulkFetchError("given up before it was sent")
                connection.send(grant, signature, fetch, node_id=self._node.node_id)
                self._sent = True
            chunks = connection.receive(timeout_s=timeout_s)
            try:
                for chunk in chunks:
                    self._answered = True
                    yield FetchPiece(
                        chunk.topic,
                        chunk.partition,
                        chunk.high_watermark,
                        chunk.log_start_offset,
                        chunk.records,
                        chunk.error,
                        chunk.error_message,
                        chunk.header.last_stable_offset,
                        tuple(
                            (a.producer_id, a.first_offset)
                            for a in chunk.header.aborted_transactions
                        ),
                    )
            except GeneratorExit:
                # The reader left mid-answer (its caller went away, or had enough): the
                # node, which began answering, sends the rest at once; it is read off and
                # dropped, so the connection serves the next fetch, unless that is much.
                connection.set_receive_timeout(DRAIN_TIMEOUT_S)
                _drain(chunks)
                raise
        except BulkRefused as exc:
            logger.warning(
                "node %d refuses the fetch relay (%s): its fetches go over gRPC for %.0f s",
                self._node.node_id,
                exc,
                RETRY_REFUSED_AFTER_S,
            )
            self._relay.pool.refuse(self._node, RETRY_REFUSED_AFTER_S)
            raise
        finally:
            with self._lock:
                self._done = True
            # Closed unless the answer was read to its end: only then is it reused.
            self._relay.pool.give_back(self._node, connection)


def _drain(chunks: Iterator[BulkMessage]) -> None:
    """Read the rest of an answer, up to MAX_DRAINED_BYTES (past that, on a failure, or past
    DRAIN_TIMEOUT_S without a byte, the answer is left unread, so its connection is
    closed)."""
    drained = 0
    try:
        for chunk in chunks:
            drained += len(chunk.records)
            if drained > MAX_DRAINED_BYTES:
                return
    except BulkFetchError:
        pass


def cancel_with(context: CallScope, cancel: Callable[[], object]) -> None:
    """`cancel` once the caller's call ends; now if it has ended already (a client that gave
    up while the node's call was being opened: gRPC then takes no callback)."""
    if not context.add_callback(cancel):
        cancel()


def fetch_error(topic: str, partition: int, error: SeglogError) -> FetchPiece:
    """A partition's answer holding `error`."""
    return FetchPiece(topic, partition, -1, -1, b"", error_code_for(error), str(error))


class FetchRelay:
    def __init__(
        self,
        secret: bytes,
        *,
        ssl_context: ssl.SSLContext | None = None,
        traced: bool = False,
        grant_ttl_ms: int = grants.DEFAULT_GRANT_TTL_MS,
        max_connections_per_node: int = MAX_CONNECTIONS_PER_NODE,
    ) -> None:
        self.grants = grants.RelayGrants(secret, ttl_ms=grant_ttl_ms, fetch_relay=True)
        self.pool = BulkPool(max_connections_per_node, ssl_context=ssl_context, traced=traced)
        self.deadlines = CancelDeadlines(CANCEL_GRACE_S)

    def fetch(
        self,
        target: Target,
        request: common_pb2.FetchRequest,
        payload: bytes,
        indexes: list[int],
        timeout_s: float,
        context: CallScope,
        keep_cancel: Callable[[Callable[[], object]], None] | None,
    ) -> Generator[FetchAnswer, None, bool]:
        """GatewayService._relay's fetch `payload` (the partitions `indexes` of `request`)
        to the `target` leader over its bulk listener, cancelled when the call ends and handed to
        `keep_cancel` (fetch_fanout.py, whose presence says the fetch spans nodes); False
        when it should go over gRPC instead (RelayedFetch.relay)."""
        relayed = (
            self.take(target.node_id, target.bulk_address, spans_nodes=keep_cancel is not None)
            if relayable(request)
            else None
        )
        if relayed is None:
            return False
        on_cancel: list[Callable[[Callable[[], object]], object]] = [
            functools.partial(cancel_with, context)
        ]
        if keep_cancel is not None:
            on_cancel.append(keep_cancel)
        return (
            yield from relayed.relay(
                request, payload, indexes, timeout_s, on_cancel, context.is_active
            )
        )

    def take(self, node_id: int, address: str, *, spans_nodes: bool) -> RelayedFetch | None:
        """A connection for one fetch to the node, or None: use gRPC. On TLS, a fetch that
        spans several nodes goes over gRPC: once one node answers, the others' polls are
        given up (fetch_fanout.py), and a TLS connection can only be shut down for that,
        so each such fetch would cost new connections and handshakes."""
        if not address or (spans_nodes and self.pool.ssl_context is not None):
            return None
        taken = self.pool.take(node_id, address)
        return None if taken is None else RelayedFetch(self, *taken)

    def close(self) -> None:
        self.deadlines.close()
        self.pool.close()
