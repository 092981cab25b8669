"""Produce requests sent to storage nodes' bulk listeners (bulk.md, version 3), over kept
TCP connections: the gateway's relay (its own `produce_relay` grant) and a producer sending
straight to its leaders (a grant from Gateway.ProduceGrants) both go this way.

A gRPC unary call costs about 0.75 ms of round trip in Python here, ten times a plain TCP
exchange, and most of it is CPU on both sides. The bulk listener hands the request's bytes to
the same code as the node's gRPC Append (storage_node/produce_requests.py) and answers the
ProduceResponse's bytes.

Each node has a pool of connections (bulk_pool.py): a request takes an idle one (or opens
one), is sent, its answer read, and the connection goes back, so concurrent produces to one
node go on separate connections, one request in flight on each; past
`max_connections_per_node` in use, the request is not taken (the caller sends it over gRPC).

When the bulk path cannot take a request — no bulk address, the node unreachable, a node that
refuses the grant (one that serves fetches only, a secret of its own, an expired grant) —
nothing was written, `send` answers None and the caller sends it over gRPC; a node that
refused is left alone for `RETRY_REFUSED_AFTER_S`, one that could not be reached for
bulk_pool.RETRY_UNREACHABLE_AFTER_S. Once a request was sent, a lost connection
is the caller's error (LEADER_NOT_AVAILABLE, or REQUEST_TIMED_OUT past the deadline): the
node may have written it, as with a gRPC call cut short, and the producer's retry settles it.

A client's grant refused with PERMISSION_DENIED (`client_grants`) is the grant's refusal, not
the path's: one given under ACLs changed since (bulk.md, "Grants and ACL changes"), or for
other topics. `settle` raises GrantRefused, the node is not left alone, and the caller asks
the gateway for a new grant.
"""

from __future__ import annotations

import logging
import ssl

from ..errors import LeaderNotAvailableError, RequestTimedOutError, SeglogError
from ..v1 import bulk_pb2, common_pb2
from .bulk_client import BulkFetchError, BulkRelayTimeout
from .bulk_pool import BulkPool, NodePool
from .status import error_from_code

logger = logging.getLogger(__name__)

# Connections kept per node, busy or idle. A burst past it goes over gRPC: the node's bulk
# listener admits only so many new connections from one host at once (its
# max_unverified_per_peer, 16), and a connection it turns away at the door would cost a
# request an error it never needed.
MAX_CONNECTIONS_PER_NODE = 16
RETRY_REFUSED_AFTER_S = 60.0


class GrantRefused(SeglogError):
    """The node refused the client's grant, nothing written: ask the gateway for a new one."""

    reason = "PERMISSION_DENIED"


class VerificationNeeded(SeglogError):
    """The node took none of a client's request: a transactional batch begins a transaction
    in its partition, which the gateway verifies with the coordinator (KIP-890,
    storage/txn_verification.py). The grant stays good; this request goes through the
    gateway."""

    reason = "INVALID_TXN_STATE"


class ProduceConnections:
    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        traced: bool = False,
        max_connections_per_node: int = MAX_CONNECTIONS_PER_NODE,
        client_grants: bool = False,
    ) -> None:
        self.pool = BulkPool(max_connections_per_node, ssl_context=ssl_context, traced=traced)
        self.client_grants = client_grants

    def send(
        self,
        node_id: int,
        address: str,
        grant: tuple[bytes, bytes],
        request: bytes,
        timeout_s: float,
    ) -> bytes | None:
        """The node's answer to the ProduceRequest `request` (its wire bytes) sent under
        `grant` (grant bytes, signature), or None when the bulk path could not take it and
        nothing was sent (the caller uses gRPC). GrantRefused: the node refused a client's
        grant, nothing written. SeglogError: the node refused the request as a whole, or the
        connection failed after it was sent."""
        if not address:
            return None
        taken = self.pool.take(node_id, address)
        if taken is None:
            return None
        node, connection = taken
        try:
            answer = connection.produce(
                grant[0], grant[1], request, node_id=node_id, timeout_s=timeout_s
            )
        except BulkRelayTimeout as exc:
            raise RequestTimedOutError(f"node {node_id}: {exc}") from None
        except BulkFetchError as exc:
            raise LeaderNotAvailableError(f"node {node_id} unavailable: {exc}") from None
        finally:
            self.pool.give_back(node, connection)  # closed on failure: then only counted out
        return self.settle(node, answer)

    def settle(self, node: NodePool, answer: bulk_pb2.BulkProduceAnswer) -> bytes | None:
        """What the node's answer stands for: the ProduceResponse's bytes; None when it
        refused the bulk path (nothing written: the caller uses gRPC, and the node is left
        to it for RETRY_REFUSED_AFTER_S); GrantRefused when it refused a client's grant;
        VerificationNeeded when a client's transactional request must go through the gateway;
        SeglogError when it refused the request whole."""
        node_id = node.node_id
        if answer.end and self.client_grants and answer.error == common_pb2.PERMISSION_DENIED:
            raise GrantRefused(f"node {node_id}: {answer.error_message}")
        if answer.end:  # the grant or the framing refused: nothing was written
            logger.warning(
                "node %d refuses bulk produce (%s): its produce goes over gRPC for %.0f s",
                node_id,
                answer.error_message,
                RETRY_REFUSED_AFTER_S,
            )
            self.pool.refuse(node, RETRY_REFUSED_AFTER_S)
            return None
        if self.client_grants and answer.error == common_pb2.INVALID_TXN_STATE:
            raise VerificationNeeded(f"node {node_id}: {answer.error_message}")
        if answer.error != common_pb2.NONE:
            error: SeglogError = error_from_code(answer.error, answer.error_message)
            raise error
        response: bytes = answer.response
        return response

    def close(self) -> None:
        self.pool.close()
