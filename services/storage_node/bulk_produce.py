"""The produce side of the storage node's bulk listener (proto/seglog/v1/bulk.md, version 3):
a ProduceRequest's wire bytes, relayed by the gateway under its relay grant or sent by a
client under a produce grant (Gateway.ProduceGrants), appended as the gRPC Append appends
(produce_requests.py) and answered with the node's ProduceResponse.

Everything that can refuse a request whole is judged before one of its bytes is read: the
grant, its framing, and room for its bytes in the node's request memory
(`queued.max.request.bytes`). A client's transactional batches (KIP-890) are taken only for
a transaction already open in their partition (storage/txn_verification.py); the gateway's
relay has had them verified by the coordinator. A refused request leaves its bytes unread and
the connection is closed, so the sender takes the request through the gateway. A client's
grant names its topics, checked against the request's topic once it is read and before
anything is written.
"""

from __future__ import annotations

from opentelemetry import propagate, trace

from seglog.errors import InvalidRequestError, PermissionDeniedError, SeglogError
from seglog.rpc import bulk_wire, grants, wire
from seglog.rpc.channels import MAX_REQUEST_BYTES
from seglog.rpc.status import error_code_for
from seglog.security.certs import GATEWAY_IDENTITY
from seglog.spans import EngineTracer
from seglog.v1 import bulk_pb2
from services.memory_pool import RequestMemoryPool

from .acl_narrowings import AclNarrowings
from .node_metrics import NodeMetrics
from .produce_requests import answer_produce
from .replica_manager import ReplicaManager

tracer = EngineTracer("seglog.storage_node.bulk")


class BulkProduce:
    def __init__(
        self,
        replicas: ReplicaManager,
        node_id: int,
        secret: bytes,
        metrics: NodeMetrics,
        request_memory: RequestMemoryPool,
        *,
        tls: bool,
        acl_narrowings: AclNarrowings,
    ) -> None:
        """`tls`: whether the listener's connections are TLS, in which case a relayed
        produce must come over the gateway's certificate. `acl_narrowings`: a client's
        grant from before the latest ACL change that may narrow access is refused."""
        self.replicas = replicas
        self.node_id = node_id
        self.secret = secret
        self.metrics = metrics
        # Produce requests' bytes in flight, whoever sends them (queued.max.request.bytes).
        self.request_memory = request_memory
        self.tls = tls
        self.acl_narrowings = acl_narrowings

    def answer(
        self,
        receiver: bulk_wire.Receiver,
        request: bulk_pb2.BulkFetchRequest,
        peer_name: str | None,
    ) -> bool:
        """Serve one produce; False when it was refused as a whole for its grant, its
        framing or want of memory (the connection is then closed, its bytes unread)."""
        conn = receiver.sock
        try:
            topics = self.check(request, peer_name)
            # Its bytes are reserved before one is read (queued.max.request.bytes).
            self.request_memory.acquire(request.produce_length)
        except SeglogError as exc:
            bulk_wire.send_message(
                conn,
                bulk_pb2.BulkProduceAnswer(
                    error=error_code_for(exc), error_message=str(exc), end=True
                ),
            )
            return False
        try:
            raw = memoryview(bytearray(request.produce_length))
            receiver.exactly_into(raw)
            parent = propagate.extract(request.trace_context) if request.trace_context else None
            # The span ends before the answer goes out, as a gRPC server's does: once the
            # gateway has the answer, the node's span is already complete.
            with tracer.start_as_current_span(
                "seglog.bulk.produce", kind=trace.SpanKind.SERVER, context=parent
            ) as span:
                try:
                    if topics is not None:
                        check_granted_topic(raw, topics)
                    # A client's transactional batches were verified by no coordinator:
                    # the node accepts only those of transactions open here.
                    response = answer_produce(
                        self.replicas, self.metrics, raw, open_transactions_only=topics is not None
                    )
                    answer = bulk_pb2.BulkProduceAnswer(response=response.SerializeToString())
                except SeglogError as exc:
                    span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
                    answer = bulk_pb2.BulkProduceAnswer(
                        error=error_code_for(exc), error_message=str(exc)
                    )
        finally:
            # Given back before the answer goes out: the request's bytes are done with, and
            # whoever reads the answer finds them free.
            self.request_memory.release(request.produce_length)
        bulk_wire.send_message(conn, answer)
        return True

    def check(
        self, request: bulk_pb2.BulkFetchRequest, peer_name: str | None
    ) -> frozenset[str] | None:
        """The produce's grant and framing, before a byte of it is read: the topics a
        client's produce grant names (Gateway.ProduceGrants gave it after checking the
        caller's Write on each), or None for the gateway's relay, which may append to any
        topic as the gRPC Append may. The relay grant is the gateway's alone (it never gives
        it to a client), and on a TLS cluster only over the gateway's certificate."""
        grant = grants.verify(self.secret, request.grant, request.signature, self.node_id)
        self.acl_narrowings.check(grant)
        if not grant.produce_relay and not grant.produce_topics:
            raise PermissionDeniedError(
                "transfer grant: neither the gateway's produce relay grant nor a produce grant"
            )
        if grant.produce_relay and self.tls and peer_name != GATEWAY_IDENTITY:
            raise PermissionDeniedError(
                f"a relayed produce needs the gateway's certificate; this connection's names "
                f"{peer_name or 'nothing'}"
            )
        if not 0 < request.produce_length <= MAX_REQUEST_BYTES:
            raise InvalidRequestError(
                f"a relayed produce of {request.produce_length} bytes: it must be 1 to "
                f"{MAX_REQUEST_BYTES}"
            )
        return None if grant.produce_relay else grant.produce_topics


def check_granted_topic(raw: memoryview, topics: frozenset[str]) -> None:
    """The request's topic is one its produce grant names."""
    try:
        topic = wire.produce_topic(raw)
    except ValueError as exc:
        raise InvalidRequestError(f"malformed ProduceRequest: {exc}") from None
    if topic not in topics:
        raise PermissionDeniedError(
            f"the produce grant names {sorted(topics)}, not {topic!r}: ask the gateway "
            f"(ProduceGrants) for this topic's"
        )
